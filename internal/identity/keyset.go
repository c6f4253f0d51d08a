package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/gpuplane/gpuplane/internal/errs"
)

const (
	// DefaultKeyRefetchInterval is the least time between two JWKS fetches
	// triggered by tokens.
	DefaultKeyRefetchInterval = 10 * time.Second
	// keyMaxAge is how long a fetched key set is used before a token
	// triggers a background refresh, so that keys the issuer has withdrawn
	// stop being honoured even when no token ever names a new key.
	keyMaxAge = time.Hour
	// maxJWKSBytes bounds what is read from the JWKS endpoint.
	maxJWKSBytes = 1 << 20
)

// keySet is the issuer's signing keys (its JWKS), cached. It replaces
// go-oidc's RemoteKeySet, which fetches the JWKS again for every token whose
// signature does not verify: a stream of forged tokens then becomes a stream
// of requests at the identity provider. Here:
//
//   - a token naming a cached key (kid) is checked against that key only; a
//     bad signature is the token's fault and never causes a fetch;
//   - a token naming an unknown key causes a fetch, but at most one per
//     refetchInterval, and concurrent misses share one fetch;
//   - a failed fetch keeps the cached keys, so tokens signed by known keys
//     keep working while the issuer is unreachable.
//
// It implements oidc.KeySet; go-oidc's IDTokenVerifier still does the
// algorithm, issuer, audience and expiry checks.
type keySet struct {
	jwksURL         string
	client          *http.Client
	algs            []jose.SignatureAlgorithm
	refetchInterval time.Duration
	now             func() time.Time
	logf            func(string, ...any)

	mu          sync.Mutex
	keys        []jose.JSONWebKey
	fetchedAt   time.Time // last successful fetch
	attemptedAt time.Time // last fetch attempt, successful or not
	lastErr     error     // of the last attempt; nil when it succeeded
	inflight    *keyFetch
	fetches     int // attempts, for tests and logs
}

// keyFetch is one JWKS request that any number of verifications wait for.
type keyFetch struct{ done chan struct{} }

// keyError carries the typed outcome of VerifySignature past go-oidc, which
// flattens the KeySet's error into a string.
type keyError struct{ err error }

type keyErrorKey struct{}

func withKeyError(ctx context.Context) (context.Context, *keyError) {
	ke := &keyError{}
	return context.WithValue(ctx, keyErrorKey{}, ke), ke
}

// keyFailure records e for verifyToken and returns it.
func keyFailure(ctx context.Context, e error) error {
	if ke, ok := ctx.Value(keyErrorKey{}).(*keyError); ok {
		ke.err = e
	}
	return e
}

// VerifySignature implements oidc.KeySet.
func (ks *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(jwt, ks.algs)
	if err != nil {
		return nil, keyFailure(ctx, unauthenticated(err, "malformed token"))
	}
	if len(jws.Signatures) != 1 {
		return nil, keyFailure(ctx, unauthenticated(nil, "malformed token"))
	}
	kid := jws.Signatures[0].Header.KeyID

	keys, stale := ks.cached()
	if payload, known, err := verifyWith(jws, keys, kid); known {
		if stale {
			ks.refreshInBackground()
		}
		if err != nil {
			return nil, keyFailure(ctx, unauthenticated(err, "invalid token signature"))
		}
		return payload, nil
	}

	// The token names a key we do not have (or names none and no cached
	// key fits): the issuer may have rotated. Ask it, within the limit.
	keys, nextFetch, fetchErr := ks.refresh(ctx)
	if err := ctx.Err(); err != nil {
		return nil, keyFailure(ctx, err)
	}
	if payload, known, err := verifyWith(jws, keys, kid); known {
		if err != nil {
			return nil, keyFailure(ctx, unauthenticated(err, "invalid token signature"))
		}
		return payload, nil
	}
	if fetchErr != nil {
		// Not the caller's fault, and signing in again would not help: the
		// token may well be valid. Retry when the next fetch may start.
		wait := max(nextFetch.Sub(ks.now()), time.Second).Round(time.Second)
		return nil, keyFailure(ctx, errs.Wrap(fetchErr, errs.KindUnavailable, errs.ReasonIdentityProviderUnavailable,
			"the identity provider's signing keys cannot be fetched right now; retry in %s", wait).
			WithRetryAfter(wait))
	}
	if kid == "" {
		return nil, keyFailure(ctx, unauthenticated(nil, "invalid token signature"))
	}
	// The issuer answered recently and does not publish this key.
	return nil, keyFailure(ctx, unauthenticated(nil, "token signing key is not known to the identity provider"))
}

// verifyWith checks jws against the keys matching kid (every key when the
// token names none). known reports whether a key was there to try; with
// kid empty it is true only when one verified, so that a kid-less token
// signed by a new key still leads to a fetch.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) (payload []byte, known bool, err error) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		p, verr := jws.Verify(&keys[i])
		if verr == nil {
			return p, true, nil
		}
		if kid != "" {
			known, err = true, verr
		}
	}
	return nil, known, err
}

// cached returns the key set and whether it is old enough to refresh.
func (ks *keySet) cached() ([]jose.JSONWebKey, bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.keys, !ks.fetchedAt.IsZero() && ks.now().Sub(ks.fetchedAt) > keyMaxAge
}

// refresh fetches the JWKS unless the last attempt was less than
// refetchInterval ago, in which case it answers from that attempt; a fetch
// in flight is joined rather than repeated. It returns the keys, the error
// of the attempt the answer is based on, and when the next fetch may start.
func (ks *keySet) refresh(ctx context.Context) (keys []jose.JSONWebKey, nextFetch time.Time, fetchErr error) {
	ks.mu.Lock()
	f := ks.inflight
	if f == nil {
		if next := ks.attemptedAt.Add(ks.refetchInterval); !ks.attemptedAt.IsZero() && ks.now().Before(next) {
			keys, fetchErr = ks.keys, ks.lastErr
			ks.mu.Unlock()
			return keys, next, fetchErr
		}
		f = ks.startFetchLocked()
	}
	ks.mu.Unlock()

	select {
	case <-ctx.Done():
		return nil, time.Now(), ctx.Err()
	case <-f.done:
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.keys, ks.attemptedAt.Add(ks.refetchInterval), ks.lastErr
}

// refreshInBackground starts a fetch if none is running and the interval
// allows one; it does not wait.
func (ks *keySet) refreshInBackground() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.inflight == nil && ks.now().Sub(ks.attemptedAt) >= ks.refetchInterval {
		ks.startFetchLocked()
	}
}

// startFetchLocked runs one fetch detached from any caller's context: a
// caller that gives up must not cancel the fetch others are waiting for.
func (ks *keySet) startFetchLocked() *keyFetch {
	f := &keyFetch{done: make(chan struct{})}
	ks.inflight = f
	ks.attemptedAt = ks.now()
	ks.fetches++
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), httpTimeout)
		defer cancel()
		keys, err := ks.fetch(ctx)
		ks.mu.Lock()
		ks.lastErr = err
		if err == nil {
			ks.keys, ks.fetchedAt = keys, ks.now()
		}
		ks.inflight = nil
		n := ks.fetches
		ks.mu.Unlock()
		close(f.done)
		if err != nil {
			ks.logf("identity: fetching the issuer's signing keys failed (attempt %d; cached keys stay in use): %v", n, err)
		} else {
			ks.logf("identity: fetched %d signing keys from %s (fetch %d)", len(keys), ks.jwksURL, n)
		}
	}()
	return f
}

// fetch reads the JWKS. Keys of types or algorithms this verifier cannot
// use, and encryption keys, are skipped rather than failing the whole set,
// since providers publish such keys next to their signing keys.
func (ks *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ks.jwksURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := ks.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", ks.jwksURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read body: %w", ks.jwksURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", ks.jwksURL, resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("GET %s: key set larger than %d bytes", ks.jwksURL, maxJWKSBytes)
	}
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("GET %s: not a JSON web key set: %w", ks.jwksURL, err)
	}
	keys := make([]jose.JSONWebKey, 0, len(raw.Keys))
	for _, r := range raw.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(r); err != nil {
			continue
		}
		if (k.Use != "" && k.Use != "sig") || !k.IsPublic() || !k.Valid() {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("GET " + ks.jwksURL + ": key set holds no usable signing key")
	}
	return keys, nil
}
