package app_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
)

// countingIssuer starts a dev issuer on addr whose JWKS requests are
// counted in fetches.
func countingIssuer(t *testing.T, addr string, fetches *atomic.Int64) *oidcdev.Issuer {
	t.Helper()
	var jwksPath atomic.Pointer[string]
	iss, err := oidcdev.New(t.Context(), oidcdev.Config{Addr: addr, Users: devenv.DemoUsers,
		WrapHandler: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if p := jwksPath.Load(); p != nil && r.URL.Path == *p {
					fetches.Add(1)
				}
				next.ServeHTTP(w, r)
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iss.Close() })
	p := iss.JWKSPath()
	jwksPath.Store(&p)
	return iss
}

// withKid returns tok with its header's kid replaced (a forgery).
func withKid(t *testing.T, tok, kid string) string {
	t.Helper()
	parts := strings.SplitN(tok, ".", 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	h["kid"] = kid
	raw, _ = json.Marshal(h)
	return base64.RawURLEncoding.EncodeToString(raw) + "." + parts[1] + "." + parts[2]
}

// TestIdentityProviderOutageThroughTheAPI runs the real server against a
// real dev issuer that is stopped and started again:
//   - 1,000 forged bearer tokens over REST cause at most one JWKS fetch per
//     refetch interval, and are all 401;
//   - with the issuer down, a token signed by the cached key still works,
//     and a token naming an unknown key is 503 / UNAVAILABLE with ErrorInfo
//     reason IDENTITY_PROVIDER_UNAVAILABLE and a retry hint (Retry-After,
//     google.rpc.RetryInfo), not a false 401;
//   - after the issuer comes back with a new signing key, its tokens work
//     and an unknown key id is 401 again.
func TestIdentityProviderOutageThroughTheAPI(t *testing.T) {
	t.Parallel()
	var fetches atomic.Int64
	iss := countingIssuer(t, "127.0.0.1:0", &fetches)
	u, err := url.Parse(iss.IssuerURL())
	if err != nil {
		t.Fatal(err)
	}
	const interval = 300 * time.Millisecond
	e := apptest.Start(t, apptest.Options{Seed: true, Issuer: iss, Config: func(c *app.Config) { c.OIDCKeyRefetchInterval = interval }})
	mint := func(iss *oidcdev.Issuer, user string) string {
		tok, err := iss.Token(t.Context(), user)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	get := func(tok string) apptest.Response { return apiDoRaw(t, e, "GET", "/v1/teams", "Bearer "+tok, nil, nil) }

	alice := mint(iss, "alice")
	if r := get(alice); r.Status != http.StatusOK {
		t.Fatalf("valid token: HTTP %d %s", r.Status, r.Body)
	}

	time.Sleep(interval)
	before := fetches.Load()
	start := time.Now()
	for i := range 1000 {
		forged := withKid(t, alice, fmt.Sprintf("forged-%d", i))
		if i%2 == 0 {
			forged = alice[:strings.LastIndex(alice, ".")+1] + "AAAA" + alice[strings.LastIndex(alice, ".")+5:]
		}
		if r := get(forged); r.Status != http.StatusUnauthorized {
			t.Fatalf("forged token %d: HTTP %d %s", i, r.Status, r.Body)
		}
	}
	elapsed := time.Since(start)
	n := fetches.Load() - before
	limit := int64(elapsed/interval) + 1
	t.Logf("1000 forged tokens over REST in %v: %d JWKS fetches (limit %d)", elapsed.Round(time.Millisecond), n, limit)
	if n > limit {
		t.Errorf("%d JWKS fetches for 1000 forged tokens in %v, want at most %d", n, elapsed, limit)
	}

	// The identity provider goes away.
	bob := mint(iss, "bob")
	if err := iss.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(interval)
	if r := get(bob); r.Status != http.StatusOK {
		t.Fatalf("token signed by the cached key during the outage: HTTP %d %s", r.Status, r.Body)
	}
	unknown := withKid(t, bob, "rotated-while-down")
	r := get(unknown)
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("unknown key id during the outage: HTTP %d %s, want 503", r.Status, r.Body)
	}
	if secs, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("Retry-After = %q, want whole seconds >= 1", r.Header.Get("Retry-After"))
	}
	wantOutageStatus(t, apiRESTStatus(t, r))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+unknown)
	_, err = e.Teams.ListTeams(ctx, &pb.ListTeamsRequest{})
	wantOutageStatus(t, status.Convert(err))

	// It comes back on the same address with a new signing key.
	restarted := countingIssuer(t, u.Host, &fetches)
	fresh := mint(restarted, "alice")
	deadline := time.Now().Add(10 * time.Second)
	for r = get(fresh); r.Status == http.StatusServiceUnavailable && time.Now().Before(deadline); r = get(fresh) {
		time.Sleep(interval / 3)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("token signed by the new key after the issuer returned: HTTP %d %s", r.Status, r.Body)
	}
	time.Sleep(interval)
	r = get(withKid(t, fresh, "never-published"))
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("unknown key id with the issuer up: HTTP %d %s, want 401", r.Status, r.Body)
	}
	if ei := apiErrorInfo(t, apiRESTStatus(t, r)); ei.GetReason() != "UNAUTHENTICATED" {
		t.Errorf("reason %q, want UNAUTHENTICATED", ei.GetReason())
	}
}

func wantOutageStatus(t *testing.T, st *status.Status) {
	t.Helper()
	if st.Code() != codes.Unavailable {
		t.Fatalf("code %v (%q), want Unavailable", st.Code(), st.Message())
	}
	if ei := apiErrorInfo(t, st); ei.GetReason() != "IDENTITY_PROVIDER_UNAVAILABLE" {
		t.Errorf("reason %q, want IDENTITY_PROVIDER_UNAVAILABLE", ei.GetReason())
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() < time.Second {
		t.Errorf("RetryInfo = %v, want a delay of at least a second", retry)
	}
	if !strings.Contains(st.Message(), "identity provider") {
		t.Errorf("message %q does not say what is unavailable", st.Message())
	}
}
