package identity

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/errs"
)

// TestWithdrawnKeyStopsVerifyingAfterMaxAge: a key the issuer no longer
// publishes is honoured at most keyMaxAge after the last fetch, even when no
// token ever names a new key. The key set is served from two real dev
// issuers in turn, as if the provider had rotated and dropped the old key.
func TestWithdrawnKeyStopsVerifyingAfterMaxAge(t *testing.T) {
	users := []oidcdev.User{{Username: "alice"}}
	oldIss, err := oidcdev.New(t.Context(), oidcdev.Config{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	defer oldIss.Close()
	newIss, err := oidcdev.New(t.Context(), oidcdev.Config{Users: users})
	if err != nil {
		t.Fatal(err)
	}
	defer newIss.Close()

	var current atomic.Pointer[oidcdev.Issuer]
	current.Store(oldIss)
	var fetches atomic.Int64
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		iss := current.Load()
		resp, err := http.Get(iss.IssuerURL() + iss.JWKSPath())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, resp.Body)
	}))
	defer jwks.Close()

	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ks := &keySet{jwksURL: jwks.URL, client: http.DefaultClient, algs: []jose.SignatureAlgorithm{jose.RS256},
		refetchInterval: time.Second, now: clock, logf: t.Logf}

	tok, err := oldIss.Token(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.VerifySignature(t.Context(), tok); err != nil {
		t.Fatalf("first verification: %v", err)
	}
	current.Store(newIss)
	advance(keyMaxAge - time.Minute)
	if _, err := ks.VerifySignature(t.Context(), tok); err != nil || fetches.Load() != 1 {
		t.Fatalf("within the max age: err %v, %d fetches (want none beyond the first)", err, fetches.Load())
	}

	advance(2 * time.Minute)
	// Still answered from the cache, but a background refresh starts.
	if _, err := ks.VerifySignature(t.Context(), tok); err != nil {
		t.Fatalf("past the max age, before the refresh: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ks.mu.Lock()
		done := ks.inflight == nil && fetches.Load() == 2
		ks.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no background refresh: %d fetches", fetches.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = ks.VerifySignature(context.Background(), tok)
	if e, ok := errs.As(err); !ok || e.Kind != errs.KindUnauthenticated {
		t.Fatalf("withdrawn key after the refresh: %v, want unauthenticated", err)
	}
	if fetches.Load() != 2 {
		t.Errorf("%d fetches, want 2 (the unknown key id is answered from the fresh fetch)", fetches.Load())
	}
}
