package identity

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

const (
	defaultUsernameClaim = "email"
	defaultGroupsClaim   = "groups"
	httpTimeout          = 10 * time.Second
	firstRetryDelay      = 200 * time.Millisecond
	maxRetryDelay        = 5 * time.Second
)

var defaultAlgs = []string{oidc.RS256, oidc.ES256}

// asymmetricAlgs is the most SupportedAlgs may allow. Symmetric (HS*) and
// "none" are never acceptable: the verification key would be public.
var asymmetricAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.EdDSA,
}

// VerifierConfig configures NewVerifier. There is intentionally no way to
// skip the issuer, audience, expiry or signature checks.
type VerifierConfig struct {
	// IssuerURL must match the discovery document's issuer exactly.
	IssuerURL string
	// ClientID must appear in the token's aud.
	ClientID string
	// UsernameClaim names the string claim used as Principal.Username;
	// "email" when empty. With "email", a token whose email_verified is
	// false is rejected.
	UsernameClaim string
	// GroupsClaim names the claim used as Principal.Groups; "groups" when
	// empty. It may be an array of strings or a single string.
	GroupsClaim string
	// SupportedAlgs is the signature algorithm allow-list; RS256 and ES256
	// when empty. Only asymmetric algorithms are accepted.
	SupportedAlgs []string
	// CACertPEM, when set, is the only trust root for the issuer's TLS
	// certificate (a private CA, e.g. the dev issuer's).
	CACertPEM []byte
	// KeyRefetchInterval is the least time between two fetches of the
	// issuer's signing keys caused by tokens naming an unknown key;
	// DefaultKeyRefetchInterval when zero. It bounds the load that forged
	// tokens can put on the identity provider, and how long a key the
	// issuer has just started using may be refused after such a fetch.
	KeyRefetchInterval time.Duration
	// Logf receives discovery progress. Tokens are never passed to it.
	Logf func(format string, args ...any)
}

// Verifier checks OIDC ID tokens. Signing keys come from the issuer's JWKS
// and are cached (see keySet): a token naming a key the cache lacks causes
// a rate-limited refetch, so key rotation at the issuer needs no restart,
// and tokens signed by cached keys keep working while the issuer is down.
type Verifier struct {
	usernameClaim string
	groupsClaim   string
	algs          []string
	keys          *keySet
	verifier      *oidc.IDTokenVerifier
	cache         verifiedCache
}

// NewVerifier discovers the issuer and returns a verifier. Discovery is
// retried with backoff until it succeeds or ctx is done, because in dev mode
// the issuer may come up a moment after the server; an issuer that answers
// with a different issuer identifier fails at once, as no retry can fix it.
func NewVerifier(ctx context.Context, cfg VerifierConfig) (*Verifier, error) {
	if err := validateIssuerURL(cfg.IssuerURL); err != nil {
		return nil, err
	}
	if cfg.ClientID == "" {
		return nil, errors.New("identity: client id is required")
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = defaultUsernameClaim
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = defaultGroupsClaim
	}
	algs := slices.Clone(cfg.SupportedAlgs)
	if len(algs) == 0 {
		algs = slices.Clone(defaultAlgs)
	}
	for _, a := range algs {
		if !slices.Contains(asymmetricAlgs, a) {
			return nil, fmt.Errorf("identity: signature algorithm %q is not allowed (use one of %s)", a, strings.Join(asymmetricAlgs, ", "))
		}
	}
	if cfg.KeyRefetchInterval < 0 {
		return nil, errors.New("identity: key refetch interval must not be negative")
	}
	if cfg.KeyRefetchInterval == 0 {
		cfg.KeyRefetchInterval = DefaultKeyRefetchInterval
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	httpClient, err := newHTTPClient(cfg.CACertPEM)
	if err != nil {
		return nil, err
	}

	provider, err := discover(oidc.ClientContext(ctx, httpClient), cfg.IssuerURL, logf)
	if err != nil {
		return nil, err
	}
	var meta struct {
		JWKSURL string `json:"jwks_uri"`
	}
	if err := provider.Claims(&meta); err != nil || meta.JWKSURL == "" {
		return nil, fmt.Errorf("identity: issuer %s publishes no jwks_uri in its discovery document", cfg.IssuerURL)
	}
	joseAlgs := make([]jose.SignatureAlgorithm, len(algs))
	for i, a := range algs {
		joseAlgs[i] = jose.SignatureAlgorithm(a)
	}
	keys := &keySet{
		jwksURL: meta.JWKSURL, client: httpClient, algs: joseAlgs,
		refetchInterval: cfg.KeyRefetchInterval, now: time.Now, logf: logf,
	}
	// Fetch the keys now, so that the first tokens need no round trip and
	// verify even if the issuer goes away right after start. A failure is
	// not fatal: the first token naming a key fetches again.
	_, _, _ = keys.refresh(ctx)
	return &Verifier{
		usernameClaim: cfg.UsernameClaim,
		groupsClaim:   cfg.GroupsClaim,
		algs:          algs,
		keys:          keys,
		verifier: oidc.NewVerifier(cfg.IssuerURL, keys, &oidc.Config{
			ClientID:             cfg.ClientID,
			SupportedSigningAlgs: algs,
		}),
	}, nil
}

func validateIssuerURL(raw string) error {
	if raw == "" {
		return errors.New("identity: issuer URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("identity: issuer URL %q must be an absolute http(s) URL", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("identity: issuer URL %q must not have a query or fragment", raw)
	}
	return nil
}

func newHTTPClient(caPEM []byte) (*http.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("identity: CA certificate PEM contains no certificate")
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	// go-oidc keeps this client for JWKS fetches, so the timeout also bounds
	// how long a token verification can hang on a slow issuer.
	return &http.Client{Transport: transport, Timeout: httpTimeout}, nil
}

func discover(ctx context.Context, issuerURL string, logf func(string, ...any)) (*oidc.Provider, error) {
	delay := firstRetryDelay
	for attempt := 1; ; attempt++ {
		provider, err := oidc.NewProvider(ctx, issuerURL)
		if err == nil {
			if attempt > 1 {
				logf("identity: OIDC issuer %s discovered after %d attempts", issuerURL, attempt)
			}
			return provider, nil
		}
		var mismatch *oidc.IssuerMismatchError
		if errors.As(err, &mismatch) {
			return nil, fmt.Errorf("identity: issuer %s calls itself %q in its discovery document; configure exactly that issuer URL: %w",
				issuerURL, mismatch.Discovered, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("identity: OIDC discovery of %s gave up after %d attempts: %w", issuerURL, attempt, err)
		}
		logf("identity: waiting for OIDC issuer %s (attempt %d, retry in %s): %v", issuerURL, attempt, delay, err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("identity: OIDC discovery of %s gave up after %d attempts: %w", issuerURL, attempt, err)
		case <-t.C:
		}
		delay = min(delay*2, maxRetryDelay)
	}
}

// Verify checks rawToken (an ID token) and returns its principal. Failures
// are *errs.Error of KindUnauthenticated with a short reason that never
// contains the token; the go-oidc detail is kept as the unexported cause for
// server logs. The one exception is a token naming a signing key that is
// not cached while the issuer cannot be reached: that is KindUnavailable
// (ReasonIdentityProviderUnavailable, with RetryAfter), because the caller
// should retry, not sign in again.
func (v *Verifier) Verify(ctx context.Context, rawToken string) (Principal, error) {
	if rawToken == "" {
		return Principal{}, unauthenticated(nil, "missing bearer token")
	}
	key := sha256.Sum256([]byte(rawToken))
	if p, ok := v.cache.get(key, time.Now()); ok {
		return p, nil
	}
	p, expiry, err := v.verify(ctx, rawToken)
	if err != nil {
		return Principal{}, err
	}
	v.cache.put(key, p, expiry, time.Now())
	return p, nil
}

func (v *Verifier) verify(ctx context.Context, rawToken string) (Principal, time.Time, error) {
	p, tok, err := v.verifyToken(ctx, rawToken)
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	p.Expiry = tok.Expiry
	return p, tok.Expiry, nil
}

func (v *Verifier) verifyToken(ctx context.Context, rawToken string) (Principal, *oidc.IDToken, error) {
	ctx, keyErr := withKeyError(ctx)
	tok, err := v.verifier.Verify(ctx, rawToken)
	if err != nil {
		if keyErr.err != nil {
			return Principal{}, nil, keyErr.err
		}
		return Principal{}, nil, v.classify(rawToken, err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Principal{}, nil, unauthenticated(err, "malformed token claims")
	}
	if tok.Subject == "" {
		return Principal{}, nil, unauthenticated(nil, "token has no sub claim")
	}

	username, err := stringClaim(claims, v.usernameClaim)
	if err != nil {
		return Principal{}, nil, err
	}
	if v.usernameClaim == "email" {
		if verified, present := claims["email_verified"]; present && !truthy(verified) {
			return Principal{}, nil, unauthenticated(nil, "token email is not verified")
		}
	}
	groups, err := groupsClaim(claims, v.groupsClaim)
	if err != nil {
		return Principal{}, nil, err
	}
	email, _ := claims["email"].(string)
	return Principal{
		Subject:  tok.Subject,
		Username: username,
		Email:    email,
		Groups:   groups,
	}, tok, nil
}

// classify maps go-oidc's errors, which are mostly untyped strings, onto
// stable caller-facing reasons. Only the messages' fixed prefixes are
// matched; the identity tests pin each branch against the real library.
func (v *Verifier) classify(raw string, err error) error {
	var expired *oidc.TokenExpiredError
	if errors.As(err, &expired) {
		return unauthenticated(err, "token expired")
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "oidc: expected audience"):
		return unauthenticated(err, "token audience mismatch")
	case strings.Contains(msg, "oidc: id token issued by a different provider"):
		return unauthenticated(err, "token issuer mismatch")
	case strings.Contains(msg, "oidc: malformed jwt"), strings.Contains(msg, "oidc: id token not signed"),
		strings.Contains(msg, "multiple signatures"):
		if alg := headerAlg(raw); alg != "" && !slices.Contains(v.algs, alg) {
			return unauthenticated(err, "token signing algorithm not allowed")
		}
		return unauthenticated(err, "malformed token")
	case strings.Contains(msg, "not before"):
		return unauthenticated(err, "token not yet valid")
	}
	return unauthenticated(err, "invalid token")
}

// headerAlg reads the JOSE header's alg without verifying anything; it only
// chooses between two rejection messages.
func headerAlg(raw string) string {
	head, _, ok := strings.Cut(raw, ".")
	if !ok {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(b, &h) != nil {
		return ""
	}
	return h.Alg
}

func stringClaim(claims map[string]any, name string) (string, error) {
	raw, ok := claims[name]
	if !ok || raw == nil {
		return "", unauthenticated(nil, "token has no "+name+" claim")
	}
	s, ok := raw.(string)
	if !ok {
		return "", unauthenticated(nil, "token "+name+" claim is not a string")
	}
	if s == "" {
		return "", unauthenticated(nil, "token has no "+name+" claim")
	}
	return s, nil
}

func groupsClaim(claims map[string]any, name string) ([]string, error) {
	switch g := claims[name].(type) {
	case nil:
		return nil, nil
	case string:
		if g == "" {
			return nil, nil
		}
		return []string{g}, nil
	case []any:
		out := make([]string, 0, len(g))
		for _, e := range g {
			s, ok := e.(string)
			if !ok {
				return nil, unauthenticated(nil, "token "+name+" claim must be strings")
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, unauthenticated(nil, "token "+name+" claim must be a string or an array of strings")
	}
}

// truthy accepts the boolean and, for providers that send it so, the string
// form of email_verified.
func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		return strings.EqualFold(b, "true")
	}
	return false
}
