package ctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/ctl"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func TestMain(m *testing.M) { storetest.Main(m) }

// harness runs the CLI in-process against one apptest server, with its own
// configuration directory.
type harness struct {
	t      *testing.T
	e      *apptest.Env
	config string
	env    map[string]string
	opts   ctl.Options
}

type result struct {
	code           int
	stdout, stderr string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	e := apptest.Start(t, apptest.Options{Seed: true})
	return &harness{t: t, e: e, config: filepath.Join(t.TempDir(), "gpuplane", "config.yaml"), env: map[string]string{}}
}

// run executes gpuplanectl with --server and --config set.
func (h *harness) run(args ...string) result {
	h.t.Helper()
	var out, errb bytes.Buffer
	opts := h.opts
	opts.Stdout, opts.Stderr, opts.Stdin = &out, &errb, strings.NewReader("")
	opts.Getenv = func(k string) string { return h.env[k] }
	full := append([]string{"--server", h.e.App.GRPCAddr(), "--config", h.config}, args...)
	code := ctl.Run(context.Background(), full, opts)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// as runs with user's token.
func (h *harness) as(user string, args ...string) result {
	h.t.Helper()
	return h.run(append([]string{"--token", h.e.Token(h.t, user)}, args...)...)
}

func (h *harness) ok(r result) result {
	h.t.Helper()
	if r.code != ctl.ExitOK {
		h.t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

var createdRE = regexp.MustCompile(`(requests/[a-z0-9-]+) created`)

func requestName(t *testing.T, r result) string {
	t.Helper()
	m := createdRE.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no request name in %q", r.stdout)
	}
	return m[1]
}

func TestGoldenTables(t *testing.T) {
	h := newHarness(t)
	golden(t, "list_teams", h.ok(h.as("alice", "list", "teams")).stdout)
	golden(t, "list_members_team_a", h.ok(h.as("bob", "list", "members", "--team", "team-a")).stdout)

	r := h.ok(h.as("bob", "request", "quota", "--team", "team-a", "--gpu", "3", "--justification", "more"))
	name := requestName(t, r)
	id := strings.TrimPrefix(name, "requests/")
	got := h.ok(h.as("bob", "get", "request", id)).stdout
	// Request ids are random; a placeholder of the same length keeps the
	// columns aligned.
	golden(t, "get_request", strings.ReplaceAll(got, id, "r"+strings.Repeat("0", len(id)-1)))
	// The same with the full name and the alias.
	if again := h.ok(h.as("bob", "get", "req", name)).stdout; again != got {
		t.Errorf("get req %s:\n%s\nwant\n%s", name, again, got)
	}

	me := h.ok(h.as("bob", "whoami")).stdout
	golden(t, "whoami_bob", strings.ReplaceAll(me, h.e.App.GRPCAddr(), "SERVER"))

	// Kind aliases and named gets.
	if out := h.ok(h.as("alice", "get", "dept")).stdout; !strings.Contains(out, "research") || !strings.Contains(out, "research-admins") {
		t.Errorf("get dept:\n%s", out)
	}
	if out := h.ok(h.as("bob", "get", "team", "team-a")).stdout; !strings.Contains(out, "team-a") || strings.Contains(out, "team-b") {
		t.Errorf("get team team-a:\n%s", out)
	}
	if r := h.ok(h.as("bob", "get", "vc")); !strings.Contains(r.stderr, "No virtualclusters found") {
		t.Errorf("empty list: %q", r.stderr)
	}
}

func TestOutputFormatsParse(t *testing.T) {
	h := newHarness(t)
	var teams pb.ListTeamsResponse
	if err := protojson.Unmarshal([]byte(h.ok(h.as("alice", "get", "teams", "-o", "json")).stdout), &teams); err != nil || len(teams.GetTeams()) != 2 {
		t.Errorf("json list: %v %v", err, teams.GetTeams())
	}
	y := h.ok(h.as("alice", "get", "teams", "-o", "yaml")).stdout
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatalf("yaml: %v\n%s", err, y)
	}
	teams.Reset()
	if err := protojson.Unmarshal(j, &teams); err != nil || len(teams.GetTeams()) != 2 || teams.GetTeams()[0].GetQuota().GetGpu() != "4" {
		t.Errorf("yaml list: %v %v", err, teams.GetTeams())
	}
	var team pb.Team
	if err := protojson.Unmarshal([]byte(h.ok(h.as("bob", "get", "team", "team-a", "-o", "json")).stdout), &team); err != nil ||
		team.GetName() != "teams/team-a" || team.GetIsolationTier() != pb.IsolationTier_SHARED {
		t.Errorf("json object: %v %v", err, &team)
	}
	var me pb.User
	j, err = yaml.YAMLToJSON([]byte(h.ok(h.as("carol", "whoami", "-o", "yaml")).stdout))
	if err != nil || protojson.Unmarshal(j, &me) != nil || me.GetUsername() != "carol@example.com" {
		t.Errorf("whoami yaml: %v %v", err, &me)
	}
	if out := h.ok(h.as("alice", "get", "teams", "-o", "name")).stdout; out != "teams/team-a\nteams/team-b\n" {
		t.Errorf("-o name: %q", out)
	}

	// Paging: one per page, --all follows the tokens.
	r := h.ok(h.as("alice", "get", "teams", "--page-size", "1"))
	if strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stderr, "--page-token") {
		t.Errorf("one page: %q / %q", r.stdout, r.stderr)
	}
	token := regexp.MustCompile(`--page-token (\S+)`).FindStringSubmatch(r.stderr)[1]
	if out := h.ok(h.as("alice", "get", "teams", "--page-size", "1", "--page-token", token)).stdout; !strings.Contains(out, "team-b") {
		t.Errorf("second page: %q", out)
	}
	r = h.ok(h.as("alice", "get", "teams", "--page-size", "1", "--all", "-o", "json"))
	teams.Reset()
	if err := protojson.Unmarshal([]byte(r.stdout), &teams); err != nil || len(teams.GetTeams()) != 2 || teams.GetNextPageToken() != "" {
		t.Errorf("--all: %v %d", err, len(teams.GetTeams()))
	}
	// Filters reach the server.
	if out := h.ok(h.as("alice", "get", "teams", "--filter", "isolation_tier = DEDICATED", "-o", "name")).stdout; out != "teams/team-b\n" {
		t.Errorf("filter: %q", out)
	}
	h.ok(h.as("bob", "request", "quota", "--team", "team-a", "--gpu", "3"))
	if out := h.ok(h.as("alice", "get", "requests", "--team", "team-b", "-o", "name")).stdout; out != "" {
		t.Errorf("requests of team-b: %q", out)
	}
	if out := h.ok(h.as("alice", "get", "requests", "--team", "team-a", "--filter", "state = PENDING", "-o", "name")).stdout; strings.Count(out, "requests/") != 1 {
		t.Errorf("pending requests of team-a: %q", out)
	}
	if out := h.ok(h.as("alice", "get", "audit", "--filter", `resource = "teams/team-a*"`, "--page-size", "3")).stdout; !strings.Contains(out, "ACTION") ||
		strings.Count(out, "\n") != 4 {
		t.Errorf("audit:\n%s", out)
	}
}

func TestExitCodes(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{
		{"get"},
		{"get", "nonsense"},
		{"get", "teams", "--bogus"},
		{"nonsense"},
		{"get", "members"}, // --team is required
		{"-o", "xml", "get", "teams"},
		{"request", "vcluster"},
		{"request", "vcluster", "x", "--cpu", "lots"},
		{"request"},
		{"create", "spaceship"},
		{"create", "member", "--team", "team-a"}, // neither --user nor --group
		{"create", "team", "t", "--department", "research", "--tier", "gold"},
		{"approve"},
		{"kubeconfig"},
		{"whoami", "extra"},
		{"get", "audit", "some-event"},
	} {
		r := h.as("bob", args...)
		if r.code != ctl.ExitUsage || !strings.HasPrefix(r.stderr, "Error: ") || !strings.Contains(r.stderr, "--help") {
			t.Errorf("%q: exit %d, stderr %q; want usage error (2)", args, r.code, r.stderr)
		}
	}

	// Server errors: exit 1 with the server's message and the reason.
	r := h.as("bob", "get", "team", "team-b")
	if r.code != ctl.ExitError || r.stderr != "Error: teams/team-b not found [NOT_FOUND]\n" {
		t.Errorf("foreign team: exit %d %q", r.code, r.stderr)
	}
	r = h.ok(h.as("bob", "request", "quota", "--team", "team-a", "--gpu", "7"))
	name := requestName(t, r)
	r = h.as("alice", "approve", name, "--reason", "sure")
	want := "Error: does not fit in department departments/research: 6 GPU free, 7 GPU requested (gpu) [QUOTA_EXCEEDED]\n" +
		"  request.change_team_quota.quota.gpu: department \"departments/research\": gpu: requested 7 GPU but only 6 GPU of 8 GPU is free (2 GPU already assigned)\n"
	if r.code != ctl.ExitError || r.stderr != want {
		t.Errorf("approve over quota: exit %d\n%q\nwant\n%q", r.code, r.stderr, want)
	}
	r = h.as("bob", "approve", name)
	if r.code != ctl.ExitError || !strings.Contains(r.stderr, "[PERMISSION_DENIED]") {
		t.Errorf("bob approves: exit %d %q", r.code, r.stderr)
	}
	r = h.ok(h.as("bob", "cancel", strings.TrimPrefix(name, "requests/")))
	if r.stdout != name+" CANCELLED\n" {
		t.Errorf("cancel: %q", r.stdout)
	}
	r = h.as("bob", "create", "member", "--team", "team-a", "--user", "x@example.com", "--role", "owner", "--request-id", strings.Repeat("x", 200))
	if r.code != ctl.ExitError || !strings.Contains(r.stderr, "[INVALID_FIELD]") || !strings.Contains(r.stderr, "request_id") {
		t.Errorf("invalid field: exit %d %q", r.code, r.stderr)
	}
	// No login at all: exit 1 with what to do.
	r = h.run("get", "teams")
	if r.code != ctl.ExitError || !strings.Contains(r.stderr, "not logged in to "+h.e.App.GRPCAddr()) || !strings.Contains(r.stderr, "gpuplanectl login") {
		t.Errorf("not logged in: exit %d %q", r.code, r.stderr)
	}
	// An expired token: UNAUTHENTICATED with the hint.
	expired, err := h.e.Issuer.TokenWith(context.Background(), "bob", oidcdev.TokenOptions{ExpiredAgo: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r = h.run("--token", expired, "whoami")
	if r.code != ctl.ExitError || !strings.Contains(r.stderr, "[UNAUTHENTICATED]") || !strings.Contains(r.stderr, "Log in again") {
		t.Errorf("expired token: exit %d %q", r.code, r.stderr)
	}

	// Creates print the name; help and completion exit 0.
	if r := h.ok(h.as("alice", "create", "department", "ops", "--gpu", "1", "--cpu", "8", "--memory", "32Gi", "--admin-group", "ops-admins")); r.stdout != "departments/ops created\n" {
		t.Errorf("create department: %q", r.stdout)
	}
	if r := h.ok(h.as("alice", "create", "team", "team-c", "--department", "ops", "--tier", "dedicated", "--gpu", "1", "--cpu", "8", "--memory", "32Gi")); r.stdout != "teams/team-c created\n" {
		t.Errorf("create team: %q", r.stdout)
	}
	if r := h.ok(h.as("alice", "create", "member", "--team", "team-c", "--group", "ml-engineers", "--role", "viewer", "-o", "json")); !strings.Contains(r.stdout, `"group": "ml-engineers"`) {
		t.Errorf("create member -o json: %q", r.stdout)
	}
	if r := h.ok(h.run("completion", "bash")); !strings.Contains(r.stdout, "bash completion") {
		t.Error("completion bash printed no script")
	}
	for _, sh := range []string{"zsh", "fish"} {
		h.ok(h.run("completion", sh))
	}
	if r := h.ok(h.run("--help")); !strings.Contains(r.stdout, "kubeconfig") {
		t.Error("--help lists no commands")
	}
}

// ---------------------------------------------------------------- login

// browser follows the issuer's pages like a user would: authorize, the
// login form, and finally the redirect to the CLI's loopback listener.
func browser(t *testing.T, authURL, user string) {
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Error(err)
		return
	}
	resp.Body.Close()
	login, err := resp.Location()
	if err != nil || login.Path != oidcdev.LoginPath {
		t.Errorf("authorize redirected to %v (%v)", login, err)
		return
	}
	resp, err = c.PostForm(login.Scheme+"://"+login.Host+oidcdev.LoginPath, url.Values{
		"authRequestID": {login.Query().Get("authRequestID")}, "username": {user}, "password": {user}})
	if err != nil {
		t.Error(err)
		return
	}
	resp.Body.Close()
	for hop := 0; hop < 5; hop++ {
		next, err := resp.Location()
		if err != nil {
			t.Errorf("login flow ended at status %d without reaching the CLI", resp.StatusCode)
			return
		}
		if resp, err = c.Get(next.String()); err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		if next.Host != login.Host { // the CLI's listener answered
			if resp.StatusCode != http.StatusOK {
				t.Errorf("CLI callback: status %d", resp.StatusCode)
			}
			return
		}
	}
	t.Error("too many redirects")
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func tokenFile(t *testing.T, h *harness) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(h.config), "token-*.json"))
	if len(matches) != 1 {
		t.Fatalf("token cache files: %v", matches)
	}
	return matches[0]
}

func readCache(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func execCredential(t *testing.T, r result) *clientauthv1.ExecCredential {
	t.Helper()
	var cred clientauthv1.ExecCredential
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cred); err != nil {
		t.Fatalf("credential output is no ExecCredential: %v\n%s", err, r.stdout)
	}
	if cred.APIVersion != "client.authentication.k8s.io/v1" || cred.Kind != "ExecCredential" || cred.Status == nil ||
		cred.Status.Token == "" || cred.Status.ExpirationTimestamp == nil {
		t.Fatalf("ExecCredential incomplete: %s", r.stdout)
	}
	return &cred
}

// whoIs asks the API server who a raw token belongs to.
func whoIs(t *testing.T, h *harness, token string) string {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	me, err := h.e.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
	if err != nil {
		t.Fatalf("token rejected by the server: %v", err)
	}
	return me.GetUsername()
}

func TestLoginRefreshAndCredential(t *testing.T) {
	h := newHarness(t)
	var wg sync.WaitGroup
	h.opts.OpenBrowser = func(u string) error {
		wg.Go(func() { browser(t, u, "bob") })
		return nil
	}
	r := h.ok(h.run("login", "--issuer", h.e.Issuer.IssuerURL()))
	wg.Wait()
	if !strings.Contains(r.stderr, "Logged in to "+h.e.App.GRPCAddr()+" as bob@example.com") || !strings.Contains(r.stderr, "/authorize?") {
		t.Errorf("login output: %q", r.stderr)
	}

	// The cache: private file in a private directory; the config remembers
	// the issuer for the server.
	path := tokenFile(t, h)
	if m := fileMode(t, path); m != 0o600 {
		t.Errorf("token cache mode %o, want 600", m)
	}
	if m := fileMode(t, filepath.Dir(path)); m != 0o700 {
		t.Errorf("config dir mode %o, want 700", m)
	}
	if m := fileMode(t, h.config); m != 0o600 {
		t.Errorf("config mode %o", m)
	}
	cfg, _ := os.ReadFile(h.config)
	if !strings.Contains(string(cfg), h.e.Issuer.IssuerURL()) || !strings.Contains(string(cfg), "currentServer: "+h.e.App.GRPCAddr()) {
		t.Errorf("config:\n%s", cfg)
	}
	cache := readCache(t, path)
	if cache["refreshToken"] == "" || cache["idToken"] == "" {
		t.Fatalf("cache without tokens: %v", cache)
	}

	// Commands use the cached login.
	if out := h.ok(h.run("whoami")).stdout; !strings.Contains(out, "bob@example.com") || !strings.Contains(out, "teams/team-a OWNER") {
		t.Errorf("whoami:\n%s", out)
	}
	// credential with a fresh token: no refresh.
	cred := execCredential(t, h.ok(h.run("credential")))
	if cred.Status.Token != cache["idToken"] {
		t.Error("credential refreshed a fresh token")
	}

	// Expire the cached ID token: credential refreshes it with the refresh
	// token, and the rotated refresh token is saved.
	expired, err := h.e.Issuer.TokenWith(context.Background(), "bob", oidcdev.TokenOptions{ExpiredAgo: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cache["idToken"] = expired
	cache["expiry"] = time.Now().Add(-time.Minute).Format(time.RFC3339)
	raw, _ := json.Marshal(cache)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cred = execCredential(t, h.ok(h.run("credential")))
	if cred.Status.Token == expired {
		t.Fatal("credential handed out the expired token")
	}
	if who := whoIs(t, h, cred.Status.Token); who != "bob@example.com" {
		t.Errorf("refreshed token is %s's", who)
	}
	if until := time.Until(cred.Status.ExpirationTimestamp.Time); until < 30*time.Minute {
		t.Errorf("refreshed token expires in %v", until)
	}
	after := readCache(t, path)
	if after["idToken"] != cred.Status.Token || after["refreshToken"] == cache["refreshToken"] || after["refreshToken"] == "" {
		t.Error("the refreshed tokens were not cached (or the refresh token not rotated)")
	}
	if m := fileMode(t, path); m != 0o600 {
		t.Errorf("token cache mode after refresh %o", m)
	}
	if _, err := os.Stat(path + ".lock"); !os.IsNotExist(err) {
		t.Error("refresh lock left behind")
	}

	// A dead refresh token: exit 1, telling the user to log in again.
	after["idToken"], after["expiry"], after["refreshToken"] = expired, time.Now().Add(-time.Minute).Format(time.RFC3339), "bogus"
	raw, _ = json.Marshal(after)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	r = h.run("credential")
	if r.code != ctl.ExitError || r.stdout != "" || !strings.Contains(r.stderr, "expired") || !strings.Contains(r.stderr, "gpuplanectl login") {
		t.Errorf("dead refresh token: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	// logout forgets the token.
	r = h.ok(h.run("logout"))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Error("logout left the token cache")
	}
	if r := h.run("whoami"); r.code != ctl.ExitError || !strings.Contains(r.stderr, "not logged in") {
		t.Errorf("after logout: exit %d %q", r.code, r.stderr)
	}
}

func TestDeviceLogin(t *testing.T) {
	h := newHarness(t)
	var wg sync.WaitGroup
	h.opts.OnDeviceCode = func(complete, code string) {
		wg.Go(func() {
			u, err := url.Parse(complete)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := http.PostForm(u.Scheme+"://"+u.Host+oidcdev.DevicePath, url.Values{
				"user_code": {code}, "username": {"dan"}, "password": {"dan"}, "action": {"approve"}})
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("device approve: status %d", resp.StatusCode)
			}
		})
	}
	h.opts.OpenBrowser = func(string) error { t.Error("device login opened a browser"); return nil }
	r := h.ok(h.run("login", "--device", "--issuer", h.e.Issuer.IssuerURL()))
	wg.Wait()
	if !strings.Contains(r.stderr, "enter the code") || !strings.Contains(r.stderr, oidcdev.DevicePath) || !strings.Contains(r.stderr, "as dan@example.com") {
		t.Errorf("device login output: %q", r.stderr)
	}
	cred := execCredential(t, h.ok(h.run("credential")))
	if who := whoIs(t, h, cred.Status.Token); who != "dan@example.com" {
		t.Errorf("device login token is %s's", who)
	}
	if m := fileMode(t, tokenFile(t, h)); m != 0o600 {
		t.Errorf("token cache mode %o", m)
	}
}

func TestCredentialWithToken(t *testing.T) {
	h := newHarness(t)
	tok := h.e.Token(t, "erin")
	cred := execCredential(t, h.ok(h.run("--token", tok, "credential")))
	if cred.Status.Token != tok {
		t.Error("credential ignored --token")
	}
	h.env[ctl.TokenEnv] = tok
	if cred := execCredential(t, h.ok(h.run("credential"))); cred.Status.Token != tok {
		t.Error("credential ignored " + ctl.TokenEnv)
	}
	delete(h.env, ctl.TokenEnv)
	if r := h.run("credential"); r.code != ctl.ExitError || r.stdout != "" {
		t.Errorf("credential without login: exit %d %q", r.code, r.stdout)
	}
}

// ---------------------------------------------------------------- request --wait, kubeconfig

// setStatus writes a status as the worker does: the row and its audit
// event (which watches see) in one transaction.
func setStatus(t *testing.T, h *harness, id, phase, message, conditions string) {
	t.Helper()
	endpoint := ""
	if phase == "READY" {
		endpoint = "https://" + id + ".vc-" + id + ".svc"
	}
	err := h.e.App.DB().InTx(context.Background(), store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		before, err := virtualcluster.Get(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE virtual_clusters SET phase = $2, status_message = $3,
			conditions = $4::jsonb, endpoint = $5, version = version + 1, update_time = now() WHERE id = $1`,
			id, phase, message, conditions, endpoint); err != nil {
			return err
		}
		after, err := virtualcluster.Get(ctx, tx, id, false)
		if err != nil {
			return err
		}
		var dept string
		if err := tx.QueryRow(ctx, `SELECT department_id FROM teams WHERE id = $1`, after.Team).Scan(&dept); err != nil {
			return err
		}
		action := "VirtualClusterStatusChanged"
		if before.Phase != after.Phase {
			action = "VirtualClusterPhase" + after.Phase.Word()
		}
		return audit.Record(ctx, tx, audit.Event{Actor: reqctx.System("worker"), Action: action, Resource: after.Name(),
			Department: dept, Team: after.Team, Before: before.Snapshot(), After: after.Snapshot()})
	})
	if err != nil {
		t.Error(err)
	}
}

// waitPhase polls the database until the virtual cluster is in phase.
func waitPhase(t *testing.T, h *harness, id, phase string) bool {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var got string
		err := h.e.App.Pool().QueryRow(context.Background(), `SELECT phase FROM virtual_clusters WHERE id = $1`, id).Scan(&got)
		if err == nil && got == phase {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%s never reached %s", id, phase)
	return false
}

const (
	condsHalf = `[{"type":"NamespaceReady","status":"TRUE"},{"type":"QueuesReady","status":"TRUE"},{"type":"ControlPlaneReady","status":"FALSE","reason":"Pending"}]`
	condsAll  = `[{"type":"NamespaceReady","status":"TRUE"},{"type":"QueuesReady","status":"TRUE"},{"type":"ControlPlaneReady","status":"TRUE"}]`
	condsFail = `[{"type":"NamespaceReady","status":"TRUE"},{"type":"ReleaseDeployed","status":"FALSE","reason":"InstallFailed"}]`
)

var progressRE = regexp.MustCompile(`(?m)^\[\s*\d+\.\ds\] `)

func TestRequestWaitAndKubeconfig(t *testing.T) {
	h := newHarness(t)
	if _, err := h.e.Policies.CreateApprovalPolicy(h.e.As(t, "alice"), &pb.CreateApprovalPolicyRequest{
		ApprovalPolicyId: "small", ApprovalPolicy: &pb.ApprovalPolicy{Expression: "request.gpu_delta <= 1.0"}}); err != nil {
		t.Fatal(err)
	}
	// No worker runs here: a goroutine plays it, through the database.
	var wg sync.WaitGroup
	wg.Go(func() {
		if !waitPhase(t, h, "ml-dev", "PROVISIONING") {
			return
		}
		time.Sleep(100 * time.Millisecond)
		setStatus(t, h, "ml-dev", "PROVISIONING", "waiting for: ControlPlaneReady", condsHalf)
		time.Sleep(150 * time.Millisecond)
		setStatus(t, h, "ml-dev", "READY", "", condsAll)
	})
	// --team comes from bob's only owned team; --cpu and --memory default.
	r := h.ok(h.as("bob", "request", "vcluster", "ml-dev", "--gpu", "1", "--wait", "--poll-interval", "1h", "--timeout", "30s"))
	wg.Wait()
	out := r.stdout
	for _, want := range []string{
		"create-vcluster ml-dev (gpu=1 cpu=8 memory=32Gi)", "State: APPROVED by policy small.",
		"PROVISIONING", "NamespaceReady ✓ QueuesReady ✓ ControlPlaneReady …", "READY", "ControlPlaneReady ✓",
		"teams/team-a/virtualClusters/ml-dev is READY",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := len(progressRE.FindAllString(out, -1)); n < 3 {
		t.Errorf("%d progress lines, want at least 3:\n%s", n, out)
	}

	// The VC as the CLI lists it.
	if out := h.ok(h.as("carol", "get", "vc")).stdout; !regexp.MustCompile(`ml-dev\s+team-a\s+READY\s+1\s+8\s+32Gi`).MatchString(out) {
		t.Errorf("get vc:\n%s", out)
	}

	// kubeconfig: printed, with the credential plugin pointing back here.
	r = h.ok(h.as("carol", "kubeconfig", "ml-dev"))
	cfg, err := clientcmd.Load([]byte(r.stdout))
	if err != nil {
		t.Fatalf("kubeconfig: %v\n%s", err, r.stdout)
	}
	u := cfg.AuthInfos["gpuplane-ml-dev"]
	if cfg.CurrentContext != "gpuplane-ml-dev" || u == nil || u.Exec == nil || u.Exec.Command != "gpuplanectl" ||
		strings.Join(u.Exec.Args, " ") != "credential --server "+h.e.App.GRPCAddr() {
		t.Fatalf("kubeconfig user: %+v\n%s", u, r.stdout)
	}
	abs, _ := filepath.Abs(h.config)
	if len(u.Exec.Env) != 1 || u.Exec.Env[0].Name != ctl.ConfigEnv || u.Exec.Env[0].Value != abs {
		t.Errorf("plugin env %v: want %s=%s", u.Exec.Env, ctl.ConfigEnv, abs)
	}
	if c := cfg.Clusters["gpuplane-ml-dev"]; c == nil || c.Server != "https://ml-dev.vc-ml-dev.svc" {
		t.Errorf("cluster %+v", c)
	}

	// --merge into an existing file keeps what was there.
	kc := filepath.Join(t.TempDir(), "kube", "config")
	if err := os.MkdirAll(filepath.Dir(kc), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod\nusers:\n- name: me\n  user:\n    token: t\ncontexts:\n- name: prod\n  context:\n    cluster: prod\n    user: me\ncurrent-context: prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = h.ok(h.as("bob", "kubeconfig", "teams/team-a/virtualClusters/ml-dev", "--merge", "--kubeconfig", kc))
	if !strings.Contains(r.stdout, `"gpuplane-ml-dev" is now the current context`) {
		t.Errorf("merge output %q", r.stdout)
	}
	merged, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	if merged.CurrentContext != "gpuplane-ml-dev" || merged.Contexts["prod"] == nil || merged.Contexts["gpuplane-ml-dev"] == nil ||
		merged.AuthInfos["me"].Token != "t" {
		t.Errorf("merged kubeconfig: current %q contexts %v", merged.CurrentContext, merged.Contexts)
	}
	// $KUBECONFIG picks the file when --kubeconfig is absent.
	kc2 := filepath.Join(t.TempDir(), "other")
	h.env["KUBECONFIG"] = kc2 + string(filepath.ListSeparator) + kc
	h.ok(h.as("bob", "kubeconfig", "ml-dev", "--merge", "--set-context=false"))
	if c, err := clientcmd.LoadFromFile(kc2); err != nil || c.Contexts["gpuplane-ml-dev"] == nil || c.CurrentContext != "gpuplane-ml-dev" {
		t.Errorf("merge via $KUBECONFIG: %v", err)
	}
	if m := fileMode(t, kc2); m != 0o600 {
		t.Errorf("merged kubeconfig mode %o", m)
	}
	delete(h.env, "KUBECONFIG")

	// Others' virtual clusters stay invisible; break glass is for admins.
	if r := h.as("erin", "kubeconfig", "ml-dev"); r.code != ctl.ExitError || !strings.Contains(r.stderr, "not found") {
		t.Errorf("erin: exit %d %q", r.code, r.stderr)
	}
	if r := h.as("bob", "kubeconfig", "ml-dev", "--break-glass"); r.code != ctl.ExitError || !strings.Contains(r.stderr, "[PERMISSION_DENIED]") {
		t.Errorf("bob break glass: exit %d %q", r.code, r.stderr)
	}

	// FAILED: exit 1 with the status message.
	wg.Go(func() {
		if waitPhase(t, h, "ml-fail", "PROVISIONING") {
			setStatus(t, h, "ml-fail", "FAILED", "helm install failed: chart not found", condsFail)
		}
	})
	r = h.as("bob", "request", "vcluster", "ml-fail", "--gpu", "1", "--wait", "--poll-interval", "1h", "--timeout", "30s")
	wg.Wait()
	if r.code != ctl.ExitError || !strings.Contains(r.stderr, "teams/team-a/virtualClusters/ml-fail FAILED: helm install failed: chart not found") ||
		!strings.Contains(r.stdout, "ReleaseDeployed ✗") {
		t.Errorf("FAILED: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}

	// Nothing happens: the timeout ends it. (Long enough that the create
	// itself answers within it on a loaded machine.)
	r = h.as("bob", "request", "vcluster", "ml-slow", "--gpu", "0.5", "--fractional", "--wait", "--poll-interval", "20ms", "--timeout", "2s")
	if r.code != ctl.ExitError || !strings.Contains(r.stderr, "timed out after 2s") || !strings.Contains(r.stderr, "still PROVISIONING") {
		t.Errorf("timeout: exit %d %q", r.code, r.stderr)
	}

	// Too big for the policy: it waits for a human, who says no.
	wg.Go(func() {
		if !waitPhase(t, h, "ml-big", "PENDING_APPROVAL") {
			return
		}
		resp, err := h.e.Requests.ListRequests(h.e.As(t, "alice"), &pb.ListRequestsRequest{Filter: "state = PENDING"})
		if err != nil || len(resp.GetRequests()) != 1 {
			t.Errorf("pending requests: %v %v", err, resp)
			return
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := h.e.Requests.RejectRequest(h.e.As(t, "alice"), &pb.RejectRequestRequest{
			Name: resp.GetRequests()[0].GetName(), Reason: "too big for now"}); err != nil {
			t.Error(err)
		}
	})
	r = h.as("bob", "request", "vcluster", "ml-big", "--gpu", "2", "--wait", "--poll-interval", "1h", "--timeout", "30s")
	wg.Wait()
	if r.code != ctl.ExitError || !strings.Contains(r.stdout, "PENDING_APPROVAL  waiting for approval") ||
		!strings.Contains(r.stderr, "REJECTED by user-alice: too big for now") {
		t.Errorf("rejected: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}

	// request quota / delete name the VC by id.
	r = h.ok(h.as("bob", "request", "quota", "ml-dev", "--memory", "48Gi", "-o", "json"))
	var req pb.Request
	if err := protojson.Unmarshal([]byte(r.stdout), &req); err != nil ||
		req.GetChangeVirtualClusterQuota().GetQuota().GetMemoryBytes() != 48<<30 ||
		req.GetChangeVirtualClusterQuota().GetQuota().GetCpuMillis() != 8000 {
		t.Errorf("request quota ml-dev: %v %s", err, r.stdout)
	}
	r = h.ok(h.as("bob", "request", "delete", "ml-dev", "--justification", "done"))
	if !strings.Contains(r.stdout, "delete-vcluster ml-dev") {
		t.Errorf("request delete: %q", r.stdout)
	}
}

// TestGetWatch: get --watch prints the current state, then each change as
// it happens, until interrupted (here: once the change was printed, or
// after 30 s; a fixed 3 s ran out on a loaded machine before the first
// answer).
func TestGetWatch(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created := regexp.MustCompile(`(?m)^request\.created\s+\S+\s+team-a\s+create-vcluster\s+watched\s`)
	go func() {
		time.Sleep(500 * time.Millisecond)
		if _, err := h.e.Requests.CreateRequest(h.e.As(t, "bob"), &pb.CreateRequestRequest{Request: &pb.Request{
			Team: "teams/team-a", Justification: "watch me",
			Payload: &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
				VirtualClusterId: "watched", Spec: &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: "0", CpuMillis: 10}}}},
		}}); err != nil {
			t.Error(err)
		}
	}()
	out := &interruptOnMatch{re: created, interrupt: cancel}
	var errb bytes.Buffer
	opts := h.opts
	opts.Stdout, opts.Stderr, opts.Stdin = out, &errb, strings.NewReader("")
	opts.Getenv = func(k string) string { return h.env[k] }
	code := ctl.Run(ctx, []string{"--server", h.e.App.GRPCAddr(), "--config", h.config, "--token", h.e.Token(t, "carol"),
		"get", "requests", "--team", "team-a", "--watch"}, opts)
	if code != ctl.ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !regexp.MustCompile(`(?m)^EVENT\s+`).MatchString(out.String()) ||
		!created.MatchString(out.String()) {
		t.Errorf("get requests --watch:\n%s", out.String())
	}
	r := h.as("carol", "get", "teams", "--watch")
	if r.code != ctl.ExitUsage || !strings.Contains(r.stderr, "--watch works for virtualclusters and requests") {
		t.Errorf("get teams --watch: exit %d %q", r.code, r.stderr)
	}
}

// interruptOnMatch is a command's output that interrupts it (as Ctrl-C
// would) once what was written matches re.
type interruptOnMatch struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	re        *regexp.Regexp
	interrupt func()
}

func (w *interruptOnMatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.re.Match(w.buf.Bytes()) {
		w.interrupt()
	}
	return n, err
}

func (w *interruptOnMatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
