package sdktest_test

import (
	"context"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/pkg/client"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestAgainstServer(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true})
	ctx := t.Context()
	var calls atomic.Int32
	bob := newClient(t, client.Config{
		Address: e.App.GRPCAddr(), Insecure: true, UserAgent: "client-test/1",
		TokenFunc: func(context.Context) (string, error) { calls.Add(1); return e.Token(t, "bob"), nil },
	})
	me, err := bob.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if me.GetUsername() != "bob@example.com" || len(me.GetTeamRoles()) != 1 || me.GetTeamRoles()[0].GetTeam() != "teams/team-a" {
		t.Errorf("bob = %v", me)
	}
	teams, err := bob.Teams.ListTeams(ctx, &pb.ListTeamsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(teams.GetTeams()) != 1 || teams.GetTeams()[0].GetName() != "teams/team-a" {
		t.Errorf("bob's teams = %v", teams.GetTeams())
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("token asked %d times for 2 calls, want once per call", n)
	}

	// Every service client is wired to the same connection.
	for name, call := range map[string]func() error{
		"Departments": func() error { _, err := bob.Departments.ListDepartments(ctx, &pb.ListDepartmentsRequest{}); return err },
		"Members": func() error {
			_, err := bob.Members.ListMembers(ctx, &pb.ListMembersRequest{Parent: "teams/team-a"})
			return err
		},
		"Audit": func() error { _, err := bob.Audit.ListAuditEvents(ctx, &pb.ListAuditEventsRequest{}); return err },
		"VirtualClusters": func() error {
			_, err := bob.VirtualClusters.ListVirtualClusters(ctx, &pb.ListVirtualClustersRequest{Parent: "teams/-"})
			return err
		},
		"Requests": func() error { _, err := bob.Requests.ListRequests(ctx, &pb.ListRequestsRequest{}); return err },
		"Policies": func() error {
			_, err := bob.Policies.ListApprovalPolicies(ctx, &pb.ListApprovalPoliciesRequest{})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Errors unpack into code, reason and field violations.
	_, err = bob.Teams.GetTeam(ctx, &pb.GetTeamRequest{Name: "teams/team-b"})
	if ae, ok := client.AsError(err); !ok || ae.Code != codes.NotFound || ae.Reason != "NOT_FOUND" {
		t.Errorf("foreign team: %v", err)
	}
	_, err = bob.Teams.GetTeam(ctx, &pb.GetTeamRequest{Name: "Teams/X"})
	if ae, ok := client.AsError(err); !ok || ae.Code != codes.InvalidArgument || len(ae.Violations) == 0 ||
		ae.Violations[0].Field != "name" || !strings.Contains(ae.Error(), "[INVALID_FIELD]") {
		t.Errorf("bad name: %#v", ae)
	}
	if client.Reason(err) != "INVALID_FIELD" {
		t.Errorf("Reason = %q", client.Reason(err))
	}

	// An oauth2.TokenSource: the ID token extra wins over the access token.
	tok := (&oauth2.Token{AccessToken: "opaque-access-token"}).WithExtra(map[string]any{"id_token": e.Token(t, "alice")})
	alice := newClient(t, client.Config{Address: e.App.GRPCAddr(), Insecure: true, TokenSource: oauth2.StaticTokenSource(tok)})
	me, err = alice.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
	if err != nil || !me.GetPlatformAdmin() {
		t.Errorf("alice via TokenSource: %v %v", me, err)
	}
	// StaticToken.
	erin := newClient(t, client.Config{Address: e.App.GRPCAddr(), Insecure: true, TokenFunc: client.StaticToken(e.Token(t, "erin"))})
	if me, err := erin.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{}); err != nil || me.GetUsername() != "erin@example.com" {
		t.Errorf("erin via StaticToken: %v %v", me, err)
	}

	// No credential: UNAUTHENTICATED.
	anon := newClient(t, client.Config{Address: e.App.GRPCAddr(), Insecure: true})
	_, err = anon.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
	if ae, ok := client.AsError(err); !ok || ae.Code != codes.Unauthenticated || ae.Reason != "UNAUTHENTICATED" {
		t.Errorf("anonymous: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, cfg := range map[string]client.Config{
		"no address":   {},
		"two tokens":   {Address: "localhost:1", TokenFunc: client.StaticToken("x"), TokenSource: oauth2.StaticTokenSource(&oauth2.Token{})},
		"attempts > 5": {Address: "localhost:1", MaxAttempts: 6},
	} {
		if c, err := client.New(t.Context(), cfg); err == nil {
			c.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestReadMethods(t *testing.T) {
	got := client.ReadMethods()
	for _, m := range []string{
		"/gpuplane.v1.TeamService/GetTeam", "/gpuplane.v1.TeamService/ListTeams",
		"/gpuplane.v1.IdentityService/GetCurrentUser", "/gpuplane.v1.AuditService/ListAuditEvents",
		"/gpuplane.v1.VirtualClusterService/GetVirtualClusterKubeconfig", "/gpuplane.v1.RequestService/CheckFit",
	} {
		if !slices.Contains(got, m) {
			t.Errorf("%s is not retried", m)
		}
	}
	for _, m := range []string{
		"/gpuplane.v1.TeamService/CreateTeam", "/gpuplane.v1.TeamService/DeleteTeam",
		"/gpuplane.v1.RequestService/CreateRequest", "/gpuplane.v1.RequestService/ApproveRequest",
	} {
		if slices.Contains(got, m) {
			t.Errorf("%s (a write) would be retried", m)
		}
	}
}

// flakyTeams answers UNAVAILABLE to the first failures calls of each method.
type flakyTeams struct {
	pb.UnimplementedTeamServiceServer
	failures int32
	mu       sync.Mutex
	calls    map[string]int32
	auth     []string
	agents   []string
}

func (f *flakyTeams) record(ctx context.Context, method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int32{}
	}
	f.calls[method]++
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth = append(f.auth, md.Get("authorization")...)
	f.agents = append(f.agents, md.Get("user-agent")...)
	if f.calls[method] <= f.failures {
		return status.Error(codes.Unavailable, "try again")
	}
	return nil
}

func (f *flakyTeams) GetTeam(ctx context.Context, req *pb.GetTeamRequest) (*pb.Team, error) {
	if err := f.record(ctx, "GetTeam"); err != nil {
		return nil, err
	}
	return &pb.Team{Name: req.GetName()}, nil
}

func (f *flakyTeams) CreateTeam(ctx context.Context, req *pb.CreateTeamRequest) (*pb.Team, error) {
	if err := f.record(ctx, "CreateTeam"); err != nil {
		return nil, err
	}
	return &pb.Team{Name: "teams/" + req.GetTeamId()}, nil
}

func startFlaky(t *testing.T, failures int32) (*flakyTeams, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &flakyTeams{failures: failures}
	pb.RegisterTeamServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

func TestRetriesIdempotentReadsOnly(t *testing.T) {
	ctx := t.Context()
	f, addr := startFlaky(t, 2)
	c := newClient(t, client.Config{Address: addr, Insecure: true, TokenFunc: client.StaticToken("tok"), UserAgent: "retry-test/1"})

	team, err := c.Teams.GetTeam(ctx, &pb.GetTeamRequest{Name: "teams/a"})
	if err != nil || team.GetName() != "teams/a" {
		t.Fatalf("GetTeam after 2 UNAVAILABLE: %v %v", team, err)
	}
	_, err = c.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: "a"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("CreateTeam: %v, want the first UNAVAILABLE (no retry)", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls["GetTeam"] != 3 || f.calls["CreateTeam"] != 1 {
		t.Errorf("calls = %v, want GetTeam 3 (2 retries), CreateTeam 1", f.calls)
	}
	for _, a := range f.auth {
		if a != "Bearer tok" {
			t.Errorf("authorization %q", a)
		}
	}
	if len(f.auth) != 4 {
		t.Errorf("%d calls carried a token, want 4 (retries included)", len(f.auth))
	}
	if len(f.agents) == 0 || !strings.HasPrefix(f.agents[0], "retry-test/1") {
		t.Errorf("user agents %v", f.agents)
	}

	// Retries disabled: the first UNAVAILABLE is final.
	f2, addr2 := startFlaky(t, 1)
	once := newClient(t, client.Config{Address: addr2, Insecure: true, MaxAttempts: 1})
	if _, err := once.Teams.GetTeam(ctx, &pb.GetTeamRequest{Name: "teams/a"}); status.Code(err) != codes.Unavailable {
		t.Errorf("MaxAttempts 1: %v", err)
	}
	f2.mu.Lock()
	defer f2.mu.Unlock()
	if f2.calls["GetTeam"] != 1 {
		t.Errorf("MaxAttempts 1: %d calls", f2.calls["GetTeam"])
	}
}

// The SDK is public: nothing under internal/ may be linked into it.
func TestNoInternalImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/gpuplane/gpuplane/pkg/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/gpuplane/gpuplane/internal/") {
			t.Errorf("pkg/client depends on %s", p)
		}
	}
}
