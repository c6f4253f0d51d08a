package identity_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
)

var users = []oidcdev.User{
	{Username: "alice", Groups: []string{"platform-admins", "team-ml"}},
	{Username: "bob"},
}

func startIssuer(t *testing.T, mutate ...func(*oidcdev.Config)) *oidcdev.Issuer {
	t.Helper()
	cfg := oidcdev.Config{Users: users}
	for _, m := range mutate {
		m(&cfg)
	}
	iss, err := oidcdev.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iss.Close() })
	return iss
}

func newVerifier(t *testing.T, iss *oidcdev.Issuer, mutate ...func(*identity.VerifierConfig)) *identity.Verifier {
	t.Helper()
	cfg := identity.VerifierConfig{
		IssuerURL: iss.IssuerURL(),
		ClientID:  "gpuplane",
		CACertPEM: iss.CACertPEM(),
		Logf:      t.Logf,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	v, err := identity.NewVerifier(ctx, cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func mint(t *testing.T, iss *oidcdev.Issuer, user string, opts oidcdev.TokenOptions) string {
	t.Helper()
	tok, err := iss.TokenWith(t.Context(), user, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// wantRejected asserts an Unauthenticated *errs.Error whose public message
// is want and which nowhere repeats the token.
func wantRejected(t *testing.T, v *identity.Verifier, token, want string) {
	t.Helper()
	p, err := v.Verify(t.Context(), token)
	if err == nil {
		t.Fatalf("token accepted as %v, want rejection %q", p, want)
	}
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("error is %T, not *errs.Error: %v", err, err)
	}
	if e.Kind != errs.KindUnauthenticated || e.Reason != errs.ReasonUnauthenticated {
		t.Errorf("kind=%v reason=%s, want unauthenticated", e.Kind, e.Reason)
	}
	if e.PublicMessage() != want {
		t.Errorf("message = %q, want %q (cause: %v)", e.PublicMessage(), want, err)
	}
	if token != "" && strings.Contains(err.Error(), token) {
		t.Error("error text contains the token")
	}
	if !reflectZero(p) {
		t.Errorf("principal returned with error: %v", p)
	}
}

func reflectZero(p identity.Principal) bool {
	return p.Subject == "" && p.Username == "" && p.Email == "" && p.Groups == nil
}

func TestVerifyValidToken(t *testing.T) {
	iss := startIssuer(t)
	v := newVerifier(t, iss)

	p, err := v.Verify(t.Context(), mint(t, iss, "alice", oidcdev.TokenOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	want := identity.Principal{
		Subject: "user-alice", Username: "alice@example.com", Email: "alice@example.com",
		Groups: []string{"platform-admins", "team-ml"},
	}
	if p.Subject != want.Subject || p.Username != want.Username || p.Email != want.Email || !slices.Equal(p.Groups, want.Groups) {
		t.Errorf("principal = %#v, want %#v", p, want)
	}

	p, err = v.Verify(t.Context(), mint(t, iss, "bob", oidcdev.TokenOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Username != "bob@example.com" || len(p.Groups) != 0 {
		t.Errorf("bob = %#v", p)
	}
}

func TestVerifyClaimMapping(t *testing.T) {
	iss := startIssuer(t)
	tok := mint(t, iss, "alice", oidcdev.TokenOptions{})

	v := newVerifier(t, iss, func(c *identity.VerifierConfig) {
		c.UsernameClaim = "preferred_username"
		// A string-valued claim stands in for a provider that sends a
		// single group as a plain string.
		c.GroupsClaim = "name"
	})
	p, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.Username != "alice" || !slices.Equal(p.Groups, []string{"alice"}) {
		t.Errorf("principal = %#v", p)
	}

	v = newVerifier(t, iss, func(c *identity.VerifierConfig) { c.GroupsClaim = "roles" })
	p, err = v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.Groups != nil {
		t.Errorf("missing groups claim gave %v", p.Groups)
	}

	v = newVerifier(t, iss, func(c *identity.VerifierConfig) { c.UsernameClaim = "upn" })
	wantRejected(t, v, tok, "token has no upn claim")

	v = newVerifier(t, iss, func(c *identity.VerifierConfig) { c.UsernameClaim = "email_verified" })
	wantRejected(t, v, tok, "token email_verified claim is not a string")

	v = newVerifier(t, iss, func(c *identity.VerifierConfig) { c.GroupsClaim = "iat" })
	wantRejected(t, v, tok, "token iat claim must be a string or an array of strings")
}

func TestVerifyRejects(t *testing.T) {
	iss := startIssuer(t)
	v := newVerifier(t, iss)
	valid := mint(t, iss, "alice", oidcdev.TokenOptions{})
	head, payload, sig := split(t, valid)

	t.Run("wrong audience", func(t *testing.T) {
		wantRejected(t, v, mint(t, iss, "alice", oidcdev.TokenOptions{Audience: "other-app"}), "token audience mismatch")
	})
	t.Run("expired", func(t *testing.T) {
		wantRejected(t, v, mint(t, iss, "alice", oidcdev.TokenOptions{ExpiredAgo: 5 * time.Minute}), "token expired")
	})
	t.Run("tampered payload", func(t *testing.T) {
		claims := decodeSegment(t, payload)
		claims["groups"] = []string{"platform-admins", "cluster-admins"}
		wantRejected(t, v, head+"."+encodeSegment(t, claims)+"."+sig, "invalid token signature")
	})
	t.Run("tampered signature", func(t *testing.T) {
		raw, err := base64.RawURLEncoding.DecodeString(sig)
		if err != nil {
			t.Fatal(err)
		}
		raw[len(raw)/2] ^= 0x01
		wantRejected(t, v, head+"."+payload+"."+base64.RawURLEncoding.EncodeToString(raw), "invalid token signature")
	})
	t.Run("signed by another issuer's key", func(t *testing.T) {
		other := startIssuer(t)
		_, _, otherSig := split(t, mint(t, other, "alice", oidcdev.TokenOptions{}))
		wantRejected(t, v, head+"."+payload+"."+otherSig, "invalid token signature")
	})
	t.Run("HS256", func(t *testing.T) {
		h := decodeSegment(t, head)
		h["alg"] = "HS256"
		signingInput := encodeSegment(t, h) + "." + payload
		mac := hmac.New(sha256.New, []byte(iss.IssuerURL()))
		mac.Write([]byte(signingInput))
		forged := signingInput + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
		wantRejected(t, v, forged, "token signing algorithm not allowed")
	})
	t.Run("alg none", func(t *testing.T) {
		forged := encodeSegment(t, map[string]any{"alg": "none", "typ": "JWT"}) + "." + payload + "."
		wantRejected(t, v, forged, "token signing algorithm not allowed")
	})
	t.Run("garbage", func(t *testing.T) {
		wantRejected(t, v, "not-a-jwt", "malformed token")
	})
	t.Run("empty", func(t *testing.T) {
		wantRejected(t, v, "", "missing bearer token")
	})
	t.Run("issuer mismatch", func(t *testing.T) {
		// The same server under another name advertises an issuer that is
		// not the configured one; no retry can fix that.
		local := strings.Replace(iss.IssuerURL(), "127.0.0.1", "localhost", 1)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := identity.NewVerifier(ctx, identity.VerifierConfig{IssuerURL: local, ClientID: "gpuplane"})
		if err == nil || !strings.Contains(err.Error(), "calls itself") {
			t.Fatalf("issuer mismatch at discovery: %v", err)
		}
		if ctx.Err() != nil {
			t.Error("issuer mismatch was retried until the deadline instead of failing at once")
		}
	})
}

func TestVerifyTLSIssuer(t *testing.T) {
	iss := startIssuer(t, func(c *oidcdev.Config) { c.TLS = true })
	v := newVerifier(t, iss)
	p, err := v.Verify(t.Context(), mint(t, iss, "alice", oidcdev.TokenOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject != "user-alice" {
		t.Errorf("principal = %v", p)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := identity.NewVerifier(ctx, identity.VerifierConfig{IssuerURL: iss.IssuerURL(), ClientID: "gpuplane"}); err == nil {
		t.Error("TLS issuer with a private CA trusted without CACertPEM")
	}
}

func TestNewVerifierWaitsForIssuer(t *testing.T) {
	// Reserve a port, free it, and bring the issuer up there only after the
	// verifier has started discovering.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	started := make(chan *oidcdev.Issuer, 1)
	go func() {
		time.Sleep(700 * time.Millisecond)
		iss, err := oidcdev.New(context.Background(), oidcdev.Config{Addr: addr, Users: users})
		if err != nil {
			t.Errorf("late issuer: %v", err)
			started <- nil
			return
		}
		started <- iss
	}()

	// Logf is called from the key set's fetch goroutine too.
	var logMu sync.Mutex
	var logged []string
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	v, err := identity.NewVerifier(ctx, identity.VerifierConfig{
		IssuerURL: "http://" + addr,
		ClientID:  "gpuplane",
		Logf:      func(f string, a ...any) { logMu.Lock(); logged = append(logged, f); logMu.Unlock() },
	})
	iss := <-started
	if iss == nil {
		t.FailNow()
	}
	defer iss.Close()
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	logMu.Lock()
	if len(logged) == 0 {
		t.Error("no progress logged while waiting")
	}
	logMu.Unlock()
	if _, err := v.Verify(t.Context(), mint(t, iss, "alice", oidcdev.TokenOptions{})); err != nil {
		t.Fatal(err)
	}
}

func TestNewVerifierGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = identity.NewVerifier(ctx, identity.VerifierConfig{IssuerURL: "http://" + addr, ClientID: "gpuplane"})
	if err == nil {
		t.Fatal("NewVerifier succeeded without an issuer")
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("gave up after %v, long past the deadline", time.Since(start))
	}
}

func TestNewVerifierValidatesConfig(t *testing.T) {
	cases := map[string]identity.VerifierConfig{
		"no issuer":       {ClientID: "x"},
		"relative issuer": {IssuerURL: "issuer.example", ClientID: "x"},
		"no client":       {IssuerURL: "https://issuer.example"},
		"HS256 allowed":   {IssuerURL: "https://issuer.example", ClientID: "x", SupportedAlgs: []string{"RS256", "HS256"}},
		"none allowed":    {IssuerURL: "https://issuer.example", ClientID: "x", SupportedAlgs: []string{"none"}},
		"bad CA":          {IssuerURL: "https://issuer.example", ClientID: "x", CACertPEM: []byte("nope")},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			if _, err := identity.NewVerifier(ctx, cfg); err == nil {
				t.Fatal("invalid config accepted")
			}
		})
	}
}

func split(t *testing.T, jwt string) (string, string, string) {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	return parts[0], parts[1], parts[2]
}

func decodeSegment(t *testing.T, seg string) map[string]any {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func encodeSegment(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
