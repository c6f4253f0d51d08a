// Package oidcdev is an in-process OpenID Provider for dev mode and tests.
//
// It is built on zitadel/oidc's op package, so discovery, JWKS, the token,
// authorize, userinfo and device authorization endpoints are a real,
// spec-following OP rather than a mock. Users, clients, sessions and keys
// live in memory and die with the process.
//
// It must never be enabled outside dev mode and tests: every password is
// a demo password, there is no CSRF or brute-force protection on the login
// pages, and the issuer has a dev-only endpoint, POST /dev/token, that
// hands out an ID token for any known user without a password.
//
// Two public clients are registered, both native apps with PKCE (S256)
// required and any loopback redirect URI ending in /callback allowed
// (RFC 8252, any port):
//
//   - Config.ClientID ("gpuplane"), the audience the API server verifies.
//   - "gpuplanectl", the CLI. Its ID tokens carry both "gpuplanectl" and
//     the API client id in aud (azp stays "gpuplanectl"), so a token the
//     CLI obtained is accepted by a verifier configured for "gpuplane".
//
// Grants: authorization_code (+PKCE), refresh_token (rotating) and
// urn:ietf:params:oauth:grant-type:device_code.
package oidcdev

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

const (
	// CLIClientID is the public client a CLI uses for the device and
	// authorization code grants.
	CLIClientID = "gpuplanectl"

	// DevTokenPath is the dev-only minting endpoint. It exists on this
	// dev issuer alone; a real identity provider has nothing like it.
	DevTokenPath = "/dev/token"

	// LoginPath is the HTML page where a demo user signs in for the
	// authorization code grant.
	LoginPath = "/login"
	// DevicePath is the same for the device grant.
	DevicePath = "/device"

	// GroupsScope may be requested for symmetry with real providers; the
	// dev issuer puts groups into every ID token regardless.
	GroupsScope = "groups"

	defaultClientID        = "gpuplane"
	defaultTokenTTL        = time.Hour
	refreshTokenTTL        = 7 * 24 * time.Hour
	authRequestTTL         = 10 * time.Minute
	deviceCodeLifetime     = 10 * time.Minute
	devicePollInterval     = 2 * time.Second
	shutdownGrace          = 5 * time.Second
	callbackPath           = "/callback"
	subjectPrefix          = "user-"
	defaultEmailDomain     = "example.com"
	passwordAMR            = "pwd"
	maxUsernameLength      = 64
	maxFormBytes           = 64 << 10
	readHeaderTimeout      = 10 * time.Second
	signingKeyBits         = 2048
	tlsCertificateValidFor = 30 * 24 * time.Hour
)

// User is a demo account.
type User struct {
	Username string
	Email    string // defaults to <username>@example.com
	Name     string // defaults to Username
	Groups   []string
	Password string // defaults to Username
}

// Subject is the stable "sub" claim of a user.
func Subject(username string) string { return subjectPrefix + username }

// Config configures New.
type Config struct {
	// Addr is the listen address; "127.0.0.1:0" when empty. An unspecified
	// host (0.0.0.0, ::) is advertised as 127.0.0.1 in the issuer URL.
	Addr  string
	Users []User
	// ClientID is the audience of tokens from Token and the client id the
	// API server verifies; "gpuplane" when empty.
	ClientID string
	// TLS serves HTTPS with a freshly generated CA, so that consumers that
	// insist on an https issuer (kube-apiserver's --oidc-issuer-url) can use
	// it. CACertPEM returns the CA to trust.
	TLS bool
	// TokenTTL is the ID and access token lifetime; 1h when zero.
	TokenTTL time.Duration
	// Logf receives progress lines. Tokens, codes and passwords are never
	// passed to it.
	Logf func(format string, args ...any)
	// WrapHandler, when set, wraps the issuer's HTTP handler, so that a
	// test can count or fail requests (JWKSPath tells the key set's path).
	WrapHandler func(http.Handler) http.Handler
}

// TokenOptions adjust a minted token, mostly for negative tests.
type TokenOptions struct {
	// TTL overrides Config.TokenTTL.
	TTL time.Duration
	// Audience, when set, replaces the client id as the token's only
	// audience (and azp), as if the token had been issued to another client.
	Audience string
	// ExpiredAgo, when positive, makes the token's exp lie this far in the
	// past. It wins over TTL.
	ExpiredAgo time.Duration
}

// Issuer is a running dev OpenID Provider.
type Issuer struct {
	cfg       Config
	issuerURL string
	caPEM     []byte
	storage   *storage
	provider  *op.Provider
	server    *http.Server
	listener  net.Listener
	serveErr  chan error
	closeOnce sync.Once
	closeErr  error
	logf      func(format string, args ...any)
}

// New starts an issuer. ctx bounds start-up only; call Close to stop it.
func New(ctx context.Context, cfg Config) (*Issuer, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.ClientID == "" {
		cfg.ClientID = defaultClientID
	}
	if cfg.ClientID == CLIClientID {
		return nil, fmt.Errorf("oidcdev: client id %q is reserved for the CLI client", CLIClientID)
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = defaultTokenTTL
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	users, err := normalizeUsers(cfg.Users)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("oidcdev: invalid listen address %q: %w", cfg.Addr, err)
	}
	advertised := advertisedHost(host)

	key, err := rsa.GenerateKey(rand.Reader, signingKeyBits)
	if err != nil {
		return nil, fmt.Errorf("oidcdev: generate signing key: %w", err)
	}
	sk, err := newSigningKey(key)
	if err != nil {
		return nil, err
	}

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("oidcdev: listen on %s: %w", cfg.Addr, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port

	scheme := "http"
	var caPEM []byte
	if cfg.TLS {
		cert, ca, err := newServingCertificate(advertised, time.Now())
		if err != nil {
			ln.Close()
			return nil, err
		}
		caPEM = ca
		ln = tls.NewListener(ln, &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
		})
		scheme = "https"
	}
	issuerURL := scheme + "://" + net.JoinHostPort(advertised, strconv.Itoa(port))

	st := newStorage(issuerURL, cfg.ClientID, cfg.TokenTTL, users, sk)
	provider, err := newProvider(issuerURL, st, !cfg.TLS)
	if err != nil {
		ln.Close()
		return nil, err
	}

	i := &Issuer{
		cfg:       cfg,
		issuerURL: issuerURL,
		caPEM:     caPEM,
		storage:   st,
		provider:  provider,
		listener:  ln,
		serveErr:  make(chan error, 1),
		logf:      logf,
	}
	handler := i.routes()
	if cfg.WrapHandler != nil {
		handler = cfg.WrapHandler(handler)
	}
	i.server = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		// Route net/http's own complaints (mostly TLS handshakes from
		// clients that do not trust the dev CA) to Logf, not stderr.
		ErrorLog: log.New(logfWriter(logf), "", 0),
	}
	go func() {
		err := i.server.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		i.serveErr <- err
	}()
	logf("dev OIDC issuer serving at %s (%d users, client ids %q and %q)",
		issuerURL, len(users), cfg.ClientID, CLIClientID)
	return i, nil
}

func newProvider(issuerURL string, st *storage, insecure bool) (*op.Provider, error) {
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		return nil, fmt.Errorf("oidcdev: generate crypto key: %w", err)
	}
	conf := &op.Config{
		// Access tokens and authorization codes are encrypted with this
		// key; a fresh key per process makes old ones useless after restart.
		CryptoKey:             cryptoKey,
		CodeMethodS256:        true,
		GrantTypeRefreshToken: true,
		SupportedClaims:       append(append([]string(nil), op.DefaultSupportedClaims...), "groups"),
		SupportedScopes: []string{
			oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail,
			oidc.ScopeOfflineAccess, GroupsScope,
		},
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime:     deviceCodeLifetime,
			PollInterval: devicePollInterval,
			UserFormPath: DevicePath,
			UserCode:     op.UserCodeBase20,
		},
	}
	var opts []op.Option
	if insecure {
		opts = append(opts, op.WithAllowInsecure())
	}
	p, err := op.NewProvider(conf, st, op.StaticIssuer(issuerURL), opts...)
	if err != nil {
		return nil, fmt.Errorf("oidcdev: create provider: %w", err)
	}
	return p, nil
}

func (i *Issuer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+LoginPath, i.loginPage)
	mux.HandleFunc("POST "+LoginPath, i.loginSubmit)
	mux.HandleFunc("GET "+DevicePath, i.devicePage)
	mux.HandleFunc("POST "+DevicePath, i.deviceSubmit)
	mux.HandleFunc("POST "+DevTokenPath, i.devToken)
	mux.Handle("/", i.provider)
	return mux
}

// IssuerURL is the issuer identifier, e.g. "http://127.0.0.1:41234".
func (i *Issuer) IssuerURL() string { return i.issuerURL }

// JWKSPath is the URL path of the issuer's signing keys (its jwks_uri).
func (i *Issuer) JWKSPath() string {
	return "/" + strings.TrimPrefix(i.provider.KeysEndpoint().Relative(), "/")
}

// ClientID is the API client id, the audience of tokens from Token.
func (i *Issuer) ClientID() string { return i.cfg.ClientID }

// CACertPEM is the PEM CA certificate that signed the serving certificate,
// or nil when TLS is off.
func (i *Issuer) CACertPEM() []byte {
	if i.caPEM == nil {
		return nil
	}
	return append([]byte(nil), i.caPEM...)
}

// Close stops serving. It is safe to call more than once.
func (i *Issuer) Close() error {
	i.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err := i.server.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, i.server.Close())
		}
		i.closeErr = errors.Join(err, <-i.serveErr)
	})
	return i.closeErr
}

// Token mints a signed ID token for a demo user, with the client id as
// audience and the configured TTL.
func (i *Issuer) Token(ctx context.Context, username string) (string, error) {
	return i.TokenWith(ctx, username, TokenOptions{})
}

// TokenWith mints a signed ID token with adjustments. The token is built and
// signed by op.CreateIDToken, the same path the token endpoint uses, so its
// claims come from the same storage callbacks as in the interactive grants.
func (i *Issuer) TokenWith(ctx context.Context, username string, opts TokenOptions) (string, error) {
	tok, _, err := i.mint(ctx, username, opts)
	return tok, err
}

// ErrUnknownUser is returned when minting for a username that is not a
// configured demo user.
var ErrUnknownUser = errors.New("oidcdev: unknown user")

func (i *Issuer) mint(ctx context.Context, username string, opts TokenOptions) (string, time.Duration, error) {
	u, ok := i.storage.userByName(username)
	if !ok {
		return "", 0, ErrUnknownUser
	}
	ttl := i.cfg.TokenTTL
	if opts.TTL > 0 {
		ttl = opts.TTL
	}
	validity := ttl
	if opts.ExpiredAgo > 0 {
		validity = -opts.ExpiredAgo
	}
	clientID := i.cfg.ClientID
	if opts.Audience != "" {
		clientID = opts.Audience
	}
	client, err := i.storage.GetClientByClientID(ctx, i.cfg.ClientID)
	if err != nil {
		return "", 0, err
	}
	req := &mintRequest{
		subject:  u.subject,
		clientID: clientID,
		scopes:   []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, GroupsScope},
		authTime: time.Now(),
	}
	tok, err := op.CreateIDToken(op.ContextWithIssuer(ctx, i.issuerURL), i.issuerURL, req, validity, "", "", i.storage, client)
	if err != nil {
		return "", 0, fmt.Errorf("oidcdev: create ID token: %w", err)
	}
	return tok, validity, nil
}

type logfWriter func(format string, args ...any)

func (w logfWriter) Write(p []byte) (int, error) {
	w("dev OIDC issuer: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func advertisedHost(host string) string {
	if host == "" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return strings.Trim(host, "[]")
}
