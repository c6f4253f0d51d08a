package app_test

// GetVirtualClusterKubeconfig: who may get one, what it contains, and that
// every break-glass use is audited. Helpers start with "kc".

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/client-go/tools/clientcmd"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

const (
	kcVCA = "teams/team-a/virtualClusters/kc-a"
	kcVCB = "teams/team-b/virtualClusters/kc-b"
)

// kcCA is a real self-signed CA certificate in PEM.
func kcCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vcluster-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// kcAdminKubeconfig looks like what vCluster writes to its Secret.
func kcAdminKubeconfig(ca []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: my-vcluster
  cluster:
    server: https://localhost:8443
    certificate-authority-data: ` + b64(ca) + `
users:
- name: my-vcluster
  user:
    client-certificate-data: ` + b64([]byte("admin-cert")) + `
    client-key-data: ` + b64([]byte("admin-key")) + `
contexts:
- name: my-vcluster
  context:
    cluster: my-vcluster
    user: my-vcluster
current-context: my-vcluster
`)
}

// kcSource stands in for the host cluster as the source of virtual
// clusters' CA and admin kubeconfig (no vCluster runs here). A nil func
// means the source has none: no CA (a kubeconfig without CA data), no
// admin kubeconfig (break glass unavailable).
type kcSource struct {
	mu    sync.Mutex
	ca    func(ctx context.Context, id string) ([]byte, error)
	admin func(ctx context.Context, id string) ([]byte, error)
}

func (k *kcSource) setCA(f func(ctx context.Context, id string) ([]byte, error)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ca = f
}

func (k *kcSource) setAdmin(f func(ctx context.Context, id string) ([]byte, error)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.admin = f
}

func (k *kcSource) VirtualClusterCA(ctx context.Context, id string) ([]byte, error) {
	k.mu.Lock()
	f := k.ca
	k.mu.Unlock()
	if f == nil {
		return nil, nil
	}
	return f(ctx, id)
}

func (k *kcSource) AdminKubeconfig(ctx context.Context, id string) ([]byte, error) {
	k.mu.Lock()
	f := k.admin
	k.mu.Unlock()
	if f == nil {
		return nil, errors.New("no host cluster")
	}
	return f(ctx, id)
}

// kcSetup: kc-a in team-a (bob), kc-b in team-b (dan), both approved by
// alice and still PROVISIONING (no worker runs here).
func kcSetup(t *testing.T) (*apptest.Env, *kcSource) {
	t.Helper()
	src := &kcSource{}
	e := apptest.Start(t, apptest.Options{Seed: true, Kubeconfigs: src})
	for _, c := range []struct{ user, team, id string }{{"bob", "team-a", "kc-a"}, {"dan", "team-b", "kc-b"}} {
		r, err := e.Requests.CreateRequest(e.As(t, c.user), &pb.CreateRequestRequest{Request: &pb.Request{
			Team: "teams/" + c.team,
			Payload: &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
				VirtualClusterId: c.id, Spec: &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: "1", CpuMillis: 1000, MemoryBytes: 1 << 30}},
			}},
		}})
		if err != nil {
			t.Fatalf("%s: create request: %v", c.user, err)
		}
		if _, err := e.Requests.ApproveRequest(e.As(t, "alice"), &pb.ApproveRequestRequest{Name: r.GetName()}); err != nil {
			t.Fatalf("approve %s: %v", r.GetName(), err)
		}
	}
	return e, src
}

func kcSetPhase(t *testing.T, e *apptest.Env, id, phase string) {
	t.Helper()
	endpoint := "https://" + id + ".vc-" + id + ".svc"
	if _, err := e.App.Pool().Exec(context.Background(),
		`UPDATE virtual_clusters SET phase = $2, endpoint = $3, version = version + 1, update_time = now() WHERE id = $1`,
		id, phase, endpoint); err != nil {
		t.Fatal(err)
	}
}

func kcGet(t *testing.T, e *apptest.Env, user, name string, breakGlass bool) (*pb.VirtualClusterKubeconfig, error) {
	t.Helper()
	return e.VirtualCluster.GetVirtualClusterKubeconfig(e.As(t, user),
		&pb.GetVirtualClusterKubeconfigRequest{Name: name, BreakGlass: breakGlass})
}

func kcReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func kcBreakGlassEvents(t *testing.T, e *apptest.Env) []*pb.AuditEvent {
	t.Helper()
	resp, err := e.Audit.ListAuditEvents(e.As(t, "alice"), &pb.ListAuditEventsRequest{
		PageSize: 500, Filter: `action = "BreakGlassKubeconfig"`})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetAuditEvents()
}

func TestKubeconfigAuthorizationMatrix(t *testing.T) {
	e, src := kcSetup(t)
	ca := kcCA(t)
	src.setCA(func(context.Context, string) ([]byte, error) { return ca, nil })
	src.setAdmin(func(context.Context, string) ([]byte, error) { return kcAdminKubeconfig(ca), nil })
	kcSetPhase(t, e, "kc-a", "READY")
	kcSetPhase(t, e, "kc-b", "DEGRADED") // usable too

	const (
		OK = codes.OK
		NF = codes.NotFound
		PD = codes.PermissionDenied
	)
	// Columns: kc-a (team-a), kc-b (team-b), each without and with break glass.
	matrix := []struct {
		user                           string
		a, b, aBreakGlass, bBreakGlass codes.Code
	}{
		{"alice", PD, PD, OK, OK}, // platform admin: no team role, but break glass
		{"frank", PD, PD, PD, PD}, // department admin: reads both teams, uses neither
		{"bob", OK, NF, PD, NF},   // team-a OWNER
		{"carol", OK, NF, PD, NF}, // team-a MEMBER
		{"dan", NF, OK, NF, PD},   // team-b OWNER
		{"erin", NF, OK, NF, PD},  // team-b MEMBER
	}
	for _, row := range matrix {
		for _, c := range []struct {
			name       string
			breakGlass bool
			want       codes.Code
		}{{kcVCA, false, row.a}, {kcVCB, false, row.b}, {kcVCA, true, row.aBreakGlass}, {kcVCB, true, row.bBreakGlass}} {
			before := len(kcBreakGlassEvents(t, e))
			got, err := kcGet(t, e, row.user, c.name, c.breakGlass)
			if code := status.Code(err); code != c.want {
				t.Errorf("%s %s break_glass=%v: %v (%v), want %v", row.user, c.name, c.breakGlass, code, err, c.want)
				continue
			}
			after := len(kcBreakGlassEvents(t, e))
			if wantEvents := before + btoi(c.want == OK && c.breakGlass); after != wantEvents {
				t.Errorf("%s %s break_glass=%v: %d break-glass audit events, want %d", row.user, c.name, c.breakGlass, after, wantEvents)
			}
			if err == nil && got.GetBreakGlass() != c.breakGlass {
				t.Errorf("%s %s: break_glass = %v in the answer", row.user, c.name, got.GetBreakGlass())
			}
			if status.Code(err) == NF && strings.Contains(status.Convert(err).Message(), "team-b") && c.name == kcVCA {
				t.Errorf("NOT_FOUND message leaks another name: %v", err)
			}
		}
	}

	// Names that do not exist, or a VC addressed under the wrong team, are
	// NOT_FOUND for everyone, members included.
	for _, name := range []string{"teams/team-a/virtualClusters/nope", "teams/nope/virtualClusters/kc-a", "teams/team-a/virtualClusters/kc-b"} {
		for _, user := range []string{"alice", "bob"} {
			if _, err := kcGet(t, e, user, name, false); status.Code(err) != NF {
				t.Errorf("%s %s: %v, want NOT_FOUND", user, name, err)
			}
		}
	}
	if _, err := kcGet(t, e, "bob", "teams/team-a", false); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed name: %v", err)
	}

	// REST: the same answers.
	r := e.Do(t, "bob", http.MethodGet, "/v1/"+kcVCA+":kubeconfig", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("REST bob: %d %s", r.Status, r.Body)
	}
	var kc pb.VirtualClusterKubeconfig
	if err := protojson.Unmarshal(r.Body, &kc); err != nil || !strings.Contains(kc.GetKubeconfig(), "gpuplanectl") {
		t.Errorf("REST body %s: %v", r.Body, err)
	}
	if r := e.Do(t, "erin", http.MethodGet, "/v1/"+kcVCA+":kubeconfig", nil); r.Status != http.StatusNotFound {
		t.Errorf("REST erin: %d %s", r.Status, r.Body)
	}
	if r := e.Do(t, "bob", http.MethodGet, "/v1/"+kcVCA+":kubeconfig?breakGlass=true", nil); r.Status != http.StatusForbidden {
		t.Errorf("REST bob break glass: %d %s", r.Status, r.Body)
	}
	if r := e.Do(t, "alice", http.MethodGet, "/v1/"+kcVCB+":kubeconfig?breakGlass=true", nil); r.Status != http.StatusOK {
		t.Errorf("REST alice break glass: %d %s", r.Status, r.Body)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestKubeconfigContent(t *testing.T) {
	e, src := kcSetup(t)
	ca := kcCA(t)
	src.setCA(func(_ context.Context, id string) ([]byte, error) {
		if id != "kc-a" {
			t.Errorf("CA fetched for %q", id)
		}
		return ca, nil
	})

	// Not before it is READY (or DEGRADED).
	_, err := kcGet(t, e, "bob", kcVCA, false)
	if status.Code(err) != codes.FailedPrecondition || kcReason(err) != "VIRTUAL_CLUSTER_NOT_READY" ||
		!strings.Contains(status.Convert(err).Message(), "PROVISIONING") {
		t.Fatalf("PROVISIONING: %v (%s)", err, kcReason(err))
	}
	kcSetPhase(t, e, "kc-a", "FAILED")
	if _, err := kcGet(t, e, "bob", kcVCA, false); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(status.Convert(err).Message(), "FAILED") {
		t.Fatalf("FAILED: %v", err)
	}
	kcSetPhase(t, e, "kc-a", "READY")

	got, err := kcGet(t, e, "carol", kcVCA, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetServer() != "https://kc-a.vc-kc-a.svc" || string(got.GetCertificateAuthorityData()) != string(ca) ||
		got.GetContext() != "gpuplane-kc-a" || got.GetBreakGlass() {
		t.Errorf("answer fields: server=%q context=%q break_glass=%v ca=%d bytes", got.GetServer(), got.GetContext(), got.GetBreakGlass(), len(got.GetCertificateAuthorityData()))
	}
	cfg, err := clientcmd.Load([]byte(got.GetKubeconfig()))
	if err != nil {
		t.Fatalf("kubeconfig does not parse: %v\n%s", err, got.GetKubeconfig())
	}
	if cfg.CurrentContext != "gpuplane-kc-a" {
		t.Errorf("current-context %q", cfg.CurrentContext)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatalf("client config: %v", err)
	}
	if rc.Host != "https://kc-a.vc-kc-a.svc" || string(rc.CAData) != string(ca) {
		t.Errorf("rest config host=%q ca=%q", rc.Host, rc.CAData)
	}
	if rc.CertData != nil || rc.KeyData != nil || rc.BearerToken != "" || rc.Username != "" {
		t.Error("kubeconfig carries a static credential")
	}
	ex := rc.ExecProvider
	if ex == nil {
		t.Fatalf("no exec credential plugin:\n%s", got.GetKubeconfig())
	}
	wantArgs := []string{"credential", "--server", e.App.GRPCAddr()}
	if ex.Command != "gpuplanectl" || !slices.Equal(ex.Args, wantArgs) || ex.APIVersion != "client.authentication.k8s.io/v1" ||
		ex.InteractiveMode != "IfAvailable" || ex.InstallHint == "" {
		t.Errorf("exec plugin: %+v, want args %v", ex, wantArgs)
	}

	// The caller names the API address the plugin should use.
	got, err = e.VirtualCluster.GetVirtualClusterKubeconfig(e.As(t, "bob"),
		&pb.GetVirtualClusterKubeconfigRequest{Name: kcVCA, ApiEndpoint: "gpuplane.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ = clientcmd.Load([]byte(got.GetKubeconfig()))
	if args := cfg.AuthInfos["gpuplane-kc-a"].Exec.Args; !slices.Equal(args, []string{"credential", "--server", "gpuplane.example.com:443"}) {
		t.Errorf("args with api_endpoint: %v", args)
	}
	for _, bad := range []string{"-rf", "a b", "x;rm -rf /", strings.Repeat("a", 300)} {
		_, err := e.VirtualCluster.GetVirtualClusterKubeconfig(e.As(t, "bob"),
			&pb.GetVirtualClusterKubeconfigRequest{Name: kcVCA, ApiEndpoint: bad})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("api_endpoint %q: %v", bad, err)
		}
	}

	// The CA not known yet: FAILED_PRECONDITION, the cause stays in the logs.
	src.setCA(func(context.Context, string) ([]byte, error) {
		return nil, errors.New(`secrets "vc-kc-a" not found`)
	})
	_, err = kcGet(t, e, "bob", kcVCA, false)
	if status.Code(err) != codes.FailedPrecondition || kcReason(err) != "KUBECONFIG_UNAVAILABLE" ||
		strings.Contains(status.Convert(err).Message(), "secrets") {
		t.Errorf("CA error: %v (%s)", err, kcReason(err))
	}
	// No CA source (no host cluster): a kubeconfig without CA data.
	src.setCA(nil)
	got, err = kcGet(t, e, "bob", kcVCA, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ = clientcmd.Load([]byte(got.GetKubeconfig()))
	if c := cfg.Clusters["gpuplane-kc-a"]; c == nil || len(c.CertificateAuthorityData) != 0 || len(got.GetCertificateAuthorityData()) != 0 {
		t.Errorf("kubeconfig without CA source: %+v", c)
	}
}

func TestKubeconfigBreakGlassAudited(t *testing.T) {
	e, src := kcSetup(t)
	ca := kcCA(t)
	kcSetPhase(t, e, "kc-b", "READY")

	// Without a host cluster there is no admin kubeconfig to hand out, and
	// nothing is recorded.
	_, err := kcGet(t, e, "alice", kcVCB, true)
	if status.Code(err) != codes.FailedPrecondition || kcReason(err) != "KUBECONFIG_UNAVAILABLE" {
		t.Fatalf("no fetcher: %v", err)
	}
	src.setAdmin(func(context.Context, string) ([]byte, error) {
		return nil, errors.New("secret not found")
	})
	if _, err := kcGet(t, e, "alice", kcVCB, true); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("fetcher error: %v", err)
	}
	if n := len(kcBreakGlassEvents(t, e)); n != 0 {
		t.Fatalf("%d audit events for break-glass attempts that handed out nothing", n)
	}

	src.setAdmin(func(_ context.Context, id string) ([]byte, error) {
		if id != "kc-b" {
			t.Errorf("admin kubeconfig fetched for %q", id)
		}
		return kcAdminKubeconfig(ca), nil
	})
	for i := 1; i <= 2; i++ {
		got, err := kcGet(t, e, "alice", kcVCB, true)
		if err != nil {
			t.Fatal(err)
		}
		if !got.GetBreakGlass() || got.GetContext() != "gpuplane-kc-b-break-glass" || string(got.GetCertificateAuthorityData()) != string(ca) {
			t.Errorf("answer: context=%q break_glass=%v", got.GetContext(), got.GetBreakGlass())
		}
		cfg, err := clientcmd.Load([]byte(got.GetKubeconfig()))
		if err != nil {
			t.Fatalf("break-glass kubeconfig does not parse: %v", err)
		}
		rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		if rc.Host != "https://kc-b.vc-kc-b.svc" || string(rc.CertData) != "admin-cert" || string(rc.KeyData) != "admin-key" ||
			rc.ExecProvider != nil || string(rc.CAData) != string(ca) {
			t.Errorf("break-glass rest config: host=%q cert=%q exec=%v", rc.Host, rc.CertData, rc.ExecProvider)
		}
		events := kcBreakGlassEvents(t, e)
		if len(events) != i {
			t.Fatalf("after %d uses: %d BreakGlassKubeconfig events", i, len(events))
		}
		ev := events[0]
		if ev.GetActor() != "user-alice" || ev.GetResource() != kcVCB || ev.GetTeam() != "teams/team-b" || ev.GetDepartment() != "departments/research" {
			t.Errorf("audit event: %v", ev)
		}
		if strings.Contains(protojson.Format(ev), base64.StdEncoding.EncodeToString([]byte("admin-key"))) {
			t.Error("the audit event holds the admin credential")
		}
	}
	// Team members see the event in their audit log too.
	resp, err := e.Audit.ListAuditEvents(e.As(t, "dan"), &pb.ListAuditEventsRequest{Filter: `action = "BreakGlassKubeconfig"`})
	if err != nil || len(resp.GetAuditEvents()) != 2 {
		t.Errorf("dan's audit view: %v %d", err, len(resp.GetAuditEvents()))
	}
}
