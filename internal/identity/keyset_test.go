package identity_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
)

// jwksGate sits in front of a real dev issuer: it counts requests for the
// issuer's key set and can fail or slow them, standing in for an identity
// provider whose JWKS endpoint is down or slow.
type jwksGate struct {
	path    atomic.Pointer[string]
	fetches atomic.Int64
	failing atomic.Bool
	delay   atomic.Int64 // nanoseconds
}

func (g *jwksGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := g.path.Load(); p != nil && r.URL.Path == *p {
			g.fetches.Add(1)
			if d := g.delay.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if g.failing.Load() {
				http.Error(w, "key service down", http.StatusServiceUnavailable)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// startGatedIssuer starts a dev issuer on addr ("" = any port) behind g.
func startGatedIssuer(t *testing.T, addr string, g *jwksGate) *oidcdev.Issuer {
	t.Helper()
	iss := startIssuer(t, func(c *oidcdev.Config) { c.Addr = addr; c.WrapHandler = g.wrap })
	path := iss.JWKSPath()
	g.path.Store(&path)
	return iss
}

func issuerAddr(t *testing.T, iss *oidcdev.Issuer) string {
	t.Helper()
	u := iss.IssuerURL()
	host, port, err := net.SplitHostPort(u[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(host, port)
}

// withHeader re-encodes tok's JOSE header after edit; the signature is
// kept, so the result is a forgery.
func withHeader(t *testing.T, tok string, edit func(map[string]any)) string {
	t.Helper()
	head, payload, sig := split(t, tok)
	h := decodeSegment(t, head)
	edit(h)
	return encodeSegment(t, h) + "." + payload + "." + sig
}

func tamperedPayload(t *testing.T, tok string) string {
	t.Helper()
	head, payload, sig := split(t, tok)
	claims := decodeSegment(t, payload)
	claims["groups"] = []string{"platform-admins"}
	return head + "." + encodeSegment(t, claims) + "." + sig
}

func unknownKid(t *testing.T, tok, kid string) string {
	return withHeader(t, tok, func(h map[string]any) { h["kid"] = kid })
}

func wantUnavailable(t *testing.T, v *identity.Verifier, token string) *errs.Error {
	t.Helper()
	_, err := v.Verify(t.Context(), token)
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.KindUnavailable || e.Reason != errs.ReasonIdentityProviderUnavailable {
		t.Fatalf("err = %v, want unavailable with reason %s", err, errs.ReasonIdentityProviderUnavailable)
	}
	if e.RetryAfter < time.Second {
		t.Errorf("retry hint %v, want at least a second", e.RetryAfter)
	}
	return e
}

// TestForgedTokensCauseFewKeyFetches sends 1,000 forged tokens of every
// shape (known key with a bad signature, unknown key id, no key id) one
// after another, then 1,000 more from 16 goroutines, and counts the
// requests the real issuer's JWKS endpoint receives. Fetches are limited
// to one per refetch interval; valid tokens verify throughout.
func TestForgedTokensCauseFewKeyFetches(t *testing.T) {
	var gate jwksGate
	iss := startGatedIssuer(t, "", &gate)
	const interval = 500 * time.Millisecond
	v := newVerifier(t, iss, func(c *identity.VerifierConfig) { c.KeyRefetchInterval = interval })
	if n := gate.fetches.Load(); n != 1 {
		t.Fatalf("start-up fetched the key set %d times, want 1", n)
	}
	// Let the interval pass so forgeries may cause a fetch at once.
	time.Sleep(interval)

	valid := make([]string, 8)
	for i := range valid {
		valid[i] = mint(t, iss, []string{"alice", "bob"}[i%2], oidcdev.TokenOptions{TTL: time.Hour + time.Duration(i)*time.Second})
	}
	forge := func(i int) (string, string) {
		tok := valid[i%len(valid)]
		switch i % 3 {
		case 0:
			return tamperedPayload(t, tok), "invalid token signature"
		case 1:
			return unknownKid(t, tok, fmt.Sprintf("forged-%d", i)), "token signing key is not known to the identity provider"
		default:
			return withHeader(t, tok, func(h map[string]any) { delete(h, "kid") }), "invalid token signature"
		}
	}
	const forgeries = 1000
	tokens := make([]string, forgeries)
	wants := make([]string, forgeries)
	for i := range tokens {
		tokens[i], wants[i] = forge(i)
	}

	before := gate.fetches.Load()
	start := time.Now()
	for i, tok := range tokens {
		wantRejected(t, v, tok, wants[i])
		if i%100 == 0 {
			if _, err := v.Verify(t.Context(), valid[i%len(valid)]); err != nil {
				t.Fatalf("valid token rejected after %d forgeries: %v", i, err)
			}
		}
	}
	elapsed := time.Since(start)
	serial := gate.fetches.Load() - before
	// One fetch may start at once, then one per interval.
	limit := int64(elapsed/interval) + 1
	t.Logf("%d forged tokens one by one in %v: %d JWKS fetches (limit %d)", forgeries, elapsed.Round(time.Millisecond), serial, limit)
	if serial > limit {
		t.Errorf("%d JWKS fetches for %d forged tokens in %v, want at most %d", serial, forgeries, elapsed, limit)
	}

	before = gate.fetches.Load()
	start = time.Now()
	var wg sync.WaitGroup
	var accepted, wrong atomic.Int64
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < forgeries; i += 16 {
				_, err := v.Verify(context.Background(), tokens[i])
				if errs.KindOf(err) != errs.KindUnauthenticated {
					wrong.Add(1)
				}
				if _, err := v.Verify(context.Background(), valid[i%len(valid)]); err == nil {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	concurrent := gate.fetches.Load() - before
	limit = int64(elapsed/interval) + 1
	t.Logf("%d forged tokens from 16 goroutines in %v: %d JWKS fetches (limit %d)", forgeries, elapsed.Round(time.Millisecond), concurrent, limit)
	if wrong.Load() != 0 {
		t.Errorf("%d forged tokens not rejected as unauthenticated", wrong.Load())
	}
	if accepted.Load() != forgeries {
		t.Errorf("%d of %d valid verifications succeeded", accepted.Load(), forgeries)
	}
	if concurrent > limit {
		t.Errorf("%d JWKS fetches for %d concurrent forged tokens in %v, want at most %d", concurrent, forgeries, elapsed, limit)
	}
}

// TestConcurrentKeyMissesShareOneFetch: with no rate limit to speak of,
// simultaneous tokens naming unknown keys still cause one fetch, not one
// each, while the issuer is slow to answer.
func TestConcurrentKeyMissesShareOneFetch(t *testing.T) {
	var gate jwksGate
	iss := startGatedIssuer(t, "", &gate)
	v := newVerifier(t, iss, func(c *identity.VerifierConfig) { c.KeyRefetchInterval = time.Nanosecond })
	tok := mint(t, iss, "alice", oidcdev.TokenOptions{})
	const delay = 300 * time.Millisecond
	gate.delay.Store(int64(delay))
	before := gate.fetches.Load()
	start := time.Now()

	const callers = 32
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-ready
			_, err := v.Verify(context.Background(), unknownKid(t, tok, fmt.Sprintf("new-%d", i)))
			if errs.KindOf(err) != errs.KindUnauthenticated {
				t.Errorf("unknown key id: %v", err)
			}
		})
	}
	close(ready)
	wg.Wait()
	// Fetches that are shared run one after another, each taking the
	// delay; separate fetches would number one per caller in about one delay.
	elapsed := time.Since(start)
	n := gate.fetches.Load() - before
	t.Logf("%d simultaneous unknown key ids in %v: %d JWKS fetches", callers, elapsed.Round(time.Millisecond), n)
	if limit := int64(elapsed/delay) + 1; n < 1 || n > limit {
		t.Errorf("%d simultaneous unknown key ids caused %d JWKS fetches in %v, want 1 to %d", callers, n, elapsed, limit)
	}
}

// TestIdentityProviderOutage stops the real issuer and starts it again on
// the same address (with a new signing key, as a restarted provider that
// rotated would have): tokens signed by the cached key keep working, an
// unknown key id is "unavailable, retry" while the issuer is down and
// "unauthenticated" once it answers without that key, and tokens signed
// by the new key verify after a refetch.
func TestIdentityProviderOutage(t *testing.T) {
	var gate jwksGate
	iss := startGatedIssuer(t, "", &gate)
	addr := issuerAddr(t, iss)
	const interval = 200 * time.Millisecond
	v := newVerifier(t, iss, func(c *identity.VerifierConfig) { c.KeyRefetchInterval = interval })

	if _, err := v.Verify(t.Context(), mint(t, iss, "alice", oidcdev.TokenOptions{})); err != nil {
		t.Fatal(err)
	}
	// Minted now but verified only during the outage, so the verified-token
	// cache cannot answer for it: only the cached key can.
	bobsToken := mint(t, iss, "bob", oidcdev.TokenOptions{})
	oldKeyToken := mint(t, iss, "alice", oidcdev.TokenOptions{TTL: 2 * time.Hour})
	if err := iss.Close(); err != nil {
		t.Fatal(err)
	}

	time.Sleep(interval)
	p, err := v.Verify(t.Context(), bobsToken)
	if err != nil || p.Subject != "user-bob" {
		t.Fatalf("token signed by a cached key during the outage: %v, %v", p, err)
	}
	e := wantUnavailable(t, v, unknownKid(t, bobsToken, "rotated-1"))
	t.Logf("unknown key id during the outage: %q (retry after %v)", e.PublicMessage(), e.RetryAfter)
	// Within the interval no new attempt is made, and the answer stays
	// "unavailable": the last attempt failed.
	_ = wantUnavailable(t, v, unknownKid(t, bobsToken, "rotated-2"))
	wantRejected(t, v, tamperedPayload(t, bobsToken), "invalid token signature")

	// The provider comes back with a new signing key.
	restarted := startGatedIssuer(t, addr, &gate)
	newKeyToken := mint(t, restarted, "alice", oidcdev.TokenOptions{})
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err = v.Verify(t.Context(), newKeyToken)
		if err == nil || errs.KindOf(err) != errs.KindUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(interval / 4)
	}
	if err != nil || p.Subject != "user-alice" {
		t.Fatalf("token signed by the new key after the issuer returned: %v, %v", p, err)
	}
	time.Sleep(interval)
	wantRejected(t, v, unknownKid(t, newKeyToken, "never-published"), "token signing key is not known to the identity provider")
	// The restarted issuer no longer publishes the old key; a refetch has
	// replaced the key set, so the old key's tokens stop verifying.
	wantRejected(t, v, oldKeyToken, "token signing key is not known to the identity provider")
}

// TestJWKSEndpointFailing: the issuer is up but its key endpoint answers
// 503; cached keys keep working, unknown key ids are unavailable, and once
// the endpoint recovers the verifier fetches again.
func TestJWKSEndpointFailing(t *testing.T) {
	var gate jwksGate
	iss := startGatedIssuer(t, "", &gate)
	const interval = 200 * time.Millisecond
	v := newVerifier(t, iss, func(c *identity.VerifierConfig) { c.KeyRefetchInterval = interval })
	tok := mint(t, iss, "alice", oidcdev.TokenOptions{})

	gate.failing.Store(true)
	time.Sleep(interval)
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("cached key while the JWKS endpoint fails: %v", err)
	}
	before := gate.fetches.Load()
	_ = wantUnavailable(t, v, unknownKid(t, tok, "k2"))
	if gate.fetches.Load() != before+1 {
		t.Errorf("JWKS fetches %d -> %d, want one attempt", before, gate.fetches.Load())
	}

	gate.failing.Store(false)
	time.Sleep(interval)
	wantRejected(t, v, unknownKid(t, tok, "k3"), "token signing key is not known to the identity provider")
}

func TestNewVerifierRejectsNegativeRefetchInterval(t *testing.T) {
	_, err := identity.NewVerifier(t.Context(), identity.VerifierConfig{
		IssuerURL: "https://issuer.example", ClientID: "x", KeyRefetchInterval: -time.Second,
	})
	if err == nil {
		t.Fatal("negative refetch interval accepted")
	}
}
