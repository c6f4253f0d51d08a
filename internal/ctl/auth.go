package ctl

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// refreshMargin: an ID token this close to expiry is refreshed first, so
// kubectl and the API never get one that dies in flight.
const refreshMargin = 2 * time.Minute

var loginScopes = []string{oidc.ScopeOpenID, "profile", "email", "groups", oidc.ScopeOfflineAccess}

// errNotLoggedIn: no usable token for the server.
type errNotLoggedIn struct {
	server string
	why    string
}

func (e errNotLoggedIn) Error() string {
	return fmt.Sprintf("%s; run: gpuplanectl login --server %s", e.why, e.server)
}

// tokenSource hands out the cached ID token of one server, refreshing it
// with the refresh token when it is about to expire.
type tokenSource struct {
	c    *cli
	path string

	mu  sync.Mutex
	tok *cachedToken
}

func (c *cli) tokenSource() (*tokenSource, error) {
	if c.tokens != nil {
		return c.tokens, nil
	}
	c.tokens = &tokenSource{c: c, path: tokenPath(c.configPath, c.server)}
	return c.tokens, nil
}

// check fails early, with advice, when there is nothing to use.
func (ts *tokenSource) check() error {
	t, err := loadToken(ts.path)
	if err != nil {
		return err
	}
	if t == nil {
		return errNotLoggedIn{server: ts.c.server, why: "not logged in to " + ts.c.server}
	}
	return nil
}

// Token returns a fresh ID token.
func (ts *tokenSource) Token(ctx context.Context) (string, error) {
	t, err := ts.current(ctx)
	if err != nil {
		return "", err
	}
	return t.IDToken, nil
}

func (ts *tokenSource) fresh(t *cachedToken) bool {
	return t != nil && t.IDToken != "" && ts.c.opts.Now().Add(refreshMargin).Before(t.Expiry)
}

// current returns the cached token, refreshed when needed.
func (ts *tokenSource) current(ctx context.Context) (*cachedToken, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.fresh(ts.tok) {
		return ts.tok, nil
	}
	t, err := loadToken(ts.path)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errNotLoggedIn{server: ts.c.server, why: "not logged in to " + ts.c.server}
	}
	if ts.fresh(t) {
		ts.tok = t
		return t, nil
	}
	if t.RefreshToken == "" {
		return nil, errNotLoggedIn{server: ts.c.server, why: "the login to " + ts.c.server + " has expired"}
	}
	unlock, err := lockFile(ts.path, 15*time.Second)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have refreshed while we waited for the lock.
	if t, err = loadToken(ts.path); err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errNotLoggedIn{server: ts.c.server, why: "not logged in to " + ts.c.server}
	}
	if ts.fresh(t) {
		ts.tok = t
		return t, nil
	}
	nt, err := ts.refresh(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := saveToken(ts.path, nt); err != nil {
		return nil, fmt.Errorf("save refreshed token: %w", err)
	}
	ts.tok = nt
	return nt, nil
}

func (ts *tokenSource) refresh(ctx context.Context, t *cachedToken) (*cachedToken, error) {
	conf := &oauth2.Config{ClientID: t.ClientID, Endpoint: oauth2.Endpoint{TokenURL: t.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, ts.c.opts.HTTPClient)
	tok, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: t.RefreshToken}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
			return nil, errNotLoggedIn{server: ts.c.server, why: "the login to " + ts.c.server + " has expired"}
		}
		return nil, fmt.Errorf("refresh the login at %s: %w", t.Issuer, err)
	}
	id, _ := tok.Extra("id_token").(string)
	if id == "" {
		return nil, fmt.Errorf("the issuer %s answered the refresh without an ID token", t.Issuer)
	}
	exp, err := jwtExpiry(id)
	if err != nil {
		return nil, fmt.Errorf("refreshed ID token: %w", err)
	}
	nt := *t
	nt.IDToken, nt.Expiry = id, exp
	if tok.RefreshToken != "" {
		nt.RefreshToken = tok.RefreshToken // rotated
	}
	return &nt, nil
}

// ---------------------------------------------------------------- login

type loginFlags struct {
	issuer, clientID string
	device           bool
	noBrowser        bool
	port             int
	timeout          time.Duration
}

func (c *cli) loginCmd() *cobra.Command {
	var f loginFlags
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log in with your identity provider (OIDC) and cache the token",
		Long: `Log in with the OIDC issuer the gpuplane server trusts.

By default a browser opens the issuer's login page (authorization code flow
with PKCE, redirected back to a one-off listener on 127.0.0.1). With --device
you get a URL and a code to enter on any other device instead.

The ID token and refresh token are cached, readable only by you, next to the
configuration file; commands refresh the ID token when it nears expiry.
For a server on localhost the issuer defaults to the dev issuer,
` + defaultDevIssuer + `.`,
		Example: `  gpuplanectl login
  gpuplanectl login --device
  gpuplanectl login --server gpuplane.example.com:443 --issuer https://sso.example.com/realms/main`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.login(cmd.Context(), f) },
	}
	cmd.Flags().StringVar(&f.issuer, "issuer", "", "OIDC issuer URL (default: as at the last login to the server; "+defaultDevIssuer+" for localhost)")
	cmd.Flags().StringVar(&f.clientID, "client-id", "", "OIDC client id of the CLI (default "+defaultClientID+")")
	cmd.Flags().BoolVar(&f.device, "device", false, "device authorization grant: print a URL and a code instead of opening a browser")
	cmd.Flags().BoolVar(&f.noBrowser, "no-browser", false, "print the login URL but do not try to open a browser")
	cmd.Flags().IntVar(&f.port, "callback-port", 0, "port of the local redirect listener (default: any free port)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up when the login is not finished within this time")
	return cmd
}

func (c *cli) login(ctx context.Context, f loginFlags) error {
	fc, err := loadConfig(c.configPath)
	if err != nil {
		return err
	}
	sc := fc.Servers[c.server]
	if f.issuer != "" {
		sc.Issuer = strings.TrimRight(f.issuer, "/")
	}
	if sc.Issuer == "" {
		if !isLoopback(c.server) {
			return usagef("--issuer is required for the first login to %s", c.server)
		}
		sc.Issuer = defaultDevIssuer
	}
	if f.clientID != "" {
		sc.ClientID = f.clientID
	}
	if sc.ClientID == "" {
		sc.ClientID = defaultClientID
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	ctx = oidc.ClientContext(ctx, c.opts.HTTPClient)
	provider, err := oidc.NewProvider(ctx, sc.Issuer)
	if err != nil {
		return fmt.Errorf("OIDC discovery at %s: %w", sc.Issuer, err)
	}
	conf := &oauth2.Config{ClientID: sc.ClientID, Endpoint: provider.Endpoint(), Scopes: loginScopes}
	conf.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	var tok *oauth2.Token
	var nonce string
	if f.device {
		tok, err = c.deviceLogin(ctx, conf)
	} else {
		tok, nonce, err = c.browserLogin(ctx, conf, f)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("login not finished within %s", f.timeout)
		}
		return err
	}
	rawID, _ := tok.Extra("id_token").(string)
	if rawID == "" {
		return errors.New("the issuer returned no ID token (is the openid scope allowed for client " + sc.ClientID + "?)")
	}
	idt, err := provider.Verifier(&oidc.Config{ClientID: sc.ClientID}).Verify(ctx, rawID)
	if err != nil {
		return fmt.Errorf("ID token from %s: %w", sc.Issuer, err)
	}
	if nonce != "" && idt.Nonce != nonce {
		return errors.New("ID token nonce does not match the login request")
	}
	ct := &cachedToken{
		Server: c.server, Issuer: sc.Issuer, ClientID: sc.ClientID, TokenEndpoint: conf.Endpoint.TokenURL,
		IDToken: rawID, RefreshToken: tok.RefreshToken, Expiry: idt.Expiry,
	}
	if err := saveToken(tokenPath(c.configPath, c.server), ct); err != nil {
		return fmt.Errorf("cache the token: %w", err)
	}
	insecure := c.insecure
	sc.Insecure = &insecure
	if fc.Servers == nil {
		fc.Servers = map[string]serverConfig{}
	}
	fc.Servers[c.server] = sc
	fc.CurrentServer = c.server
	if err := saveConfig(c.configPath, fc); err != nil {
		return fmt.Errorf("save the configuration: %w", err)
	}
	var claims struct {
		Email    string `json:"email"`
		Username string `json:"preferred_username"`
	}
	_ = idt.Claims(&claims)
	who := claims.Email
	if who == "" {
		who = idt.Subject
	}
	fmt.Fprintf(c.stderr(), "Logged in to %s as %s (issuer %s).\n", c.server, who, sc.Issuer)
	if tok.RefreshToken == "" {
		fmt.Fprintln(c.stderr(), "The issuer gave no refresh token: log in again when the token expires.")
	}
	return nil
}

func randomString() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// browserLogin: authorization code + PKCE with a loopback redirect (RFC 8252).
func (c *cli) browserLogin(ctx context.Context, conf *oauth2.Config, f loginFlags) (*oauth2.Token, string, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.port)))
	if err != nil {
		return nil, "", fmt.Errorf("listen for the login redirect: %w", err)
	}
	defer ln.Close()
	conf.RedirectURL = fmt.Sprintf("http://127.0.0.1:%d/callback", ln.Addr().(*net.TCPAddr).Port)
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()

	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	var once sync.Once
	finish := func(r result) { once.Do(func() { done <- r }) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch {
		case q.Get("state") != state:
			http.Error(w, "state mismatch: this is not the login gpuplanectl started", http.StatusBadRequest)
			return // a stray request must not end the login
		case q.Get("error") != "":
			msg := q.Get("error")
			if d := q.Get("error_description"); d != "" {
				msg += ": " + d
			}
			fmt.Fprintf(w, "<h1>Login failed</h1><p>%s</p>", html.EscapeString(msg))
			finish(result{err: fmt.Errorf("login refused by the issuer: %s", msg)})
		case q.Get("code") == "":
			http.Error(w, "no authorization code", http.StatusBadRequest)
		default:
			fmt.Fprint(w, "<h1>Logged in to gpuplane</h1><p>You can close this window and return to the terminal.</p>")
			finish(result{code: q.Get("code")})
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // closed below
	defer srv.Close()

	authURL := conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce))
	fmt.Fprintf(c.stderr(), "Opening the login page in your browser. If it does not open, visit:\n\n  %s\n\n", authURL)
	if !f.noBrowser {
		_ = c.opts.OpenBrowser(authURL)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	if r.err != nil {
		return nil, "", r.err
	}
	tok, err := conf.Exchange(context.WithValue(ctx, oauth2.HTTPClient, c.opts.HTTPClient), r.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, "", fmt.Errorf("exchange the authorization code: %w", err)
	}
	return tok, nonce, nil
}

// deviceLogin: OAuth 2.0 device authorization grant (RFC 8628).
func (c *cli) deviceLogin(ctx context.Context, conf *oauth2.Config) (*oauth2.Token, error) {
	if conf.Endpoint.DeviceAuthURL == "" {
		return nil, errors.New("the issuer does not support the device authorization grant; log in without --device")
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, c.opts.HTTPClient)
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("device authorization: %w", err)
	}
	fmt.Fprintf(c.stderr(), "To log in, visit\n\n  %s\n\nand enter the code  %s\n", da.VerificationURI, da.UserCode)
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(c.stderr(), "(or open %s)\n", da.VerificationURIComplete)
	}
	fmt.Fprintln(c.stderr(), "Waiting for the login...")
	if c.opts.OnDeviceCode != nil {
		c.opts.OnDeviceCode(da.VerificationURIComplete, da.UserCode)
	}
	tok, err := conf.DeviceAccessToken(ctx, da)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "access_denied" {
			return nil, errors.New("the login was denied")
		}
		return nil, fmt.Errorf("device login: %w", err)
	}
	return tok, nil
}

// ---------------------------------------------------------------- logout, whoami

func (c *cli) logoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the cached token of the server",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			path := tokenPath(c.configPath, c.server)
			err := os.Remove(path)
			switch {
			case err == nil:
				fmt.Fprintf(c.stderr(), "Logged out of %s.\n", c.server)
			case errors.Is(err, os.ErrNotExist):
				fmt.Fprintf(c.stderr(), "Not logged in to %s.\n", c.server)
			default:
				return err
			}
			return nil
		},
	}
}

func (c *cli) whoamiCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who the server thinks you are, and your roles",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := c.api(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := c.call(cmd.Context())
			defer cancel()
			me, err := api.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
			if err != nil {
				return err
			}
			if c.output != "table" {
				return c.printObject(me)
			}
			w := newTable(c.stdout())
			row := func(k, v string) { w.row(k+":", v) }
			row("Server", c.server)
			row("Subject", me.GetSubject())
			row("Username", me.GetUsername())
			row("Email", orDash(me.GetEmail()))
			row("Groups", orDash(strings.Join(me.GetGroups(), ", ")))
			row("Platform admin", yesNo(me.GetPlatformAdmin()))
			row("Admin of", orDash(strings.Join(me.GetAdminOfDepartments(), ", ")))
			if len(me.GetTeamRoles()) == 0 {
				row("Team roles", "-")
			}
			for i, tr := range me.GetTeamRoles() {
				k := ""
				if i == 0 {
					k = "Team roles"
				}
				w.row(k+":", fmt.Sprintf("%s %s (via %s)", tr.GetTeam(), tr.GetRole(), strings.Join(tr.GetViaMembers(), ", ")))
			}
			return w.flush()
		},
	}
}

// ---------------------------------------------------------------- credential

func (c *cli) credentialCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "credential",
		Short: "kubectl credential plugin: print an ExecCredential with your ID token",
		Long: `Print a client.authentication.k8s.io/v1 ExecCredential holding your cached
(and, when near expiry, refreshed) OIDC ID token. Kubeconfigs from
'gpuplanectl kubeconfig' run it for kubectl; you do not need to call it.

When kubectl runs it interactively and there is no valid login, it starts
the browser login itself.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			token := c.token
			if token == "" {
				ts, _ := c.tokenSource()
				t, err := ts.current(ctx)
				var nl errNotLoggedIn
				if errors.As(err, &nl) && c.execInteractive() {
					fmt.Fprintf(c.stderr(), "gpuplanectl: %s; logging in.\n", nl.why)
					if err := c.login(ctx, loginFlags{timeout: 5 * time.Minute}); err != nil {
						return err
					}
					t, err = ts.current(ctx)
				}
				if err != nil {
					return err
				}
				token = t.IDToken
			}
			cred := clientauthv1.ExecCredential{
				TypeMeta: metav1.TypeMeta{APIVersion: "client.authentication.k8s.io/v1", Kind: "ExecCredential"},
				Status:   &clientauthv1.ExecCredentialStatus{Token: token},
			}
			if exp, err := jwtExpiry(token); err == nil {
				mt := metav1.NewTime(exp)
				cred.Status.ExpirationTimestamp = &mt
			}
			out, err := json.MarshalIndent(cred, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.stdout(), "%s\n", out)
			return err
		},
	}
}

// execInteractive: kubectl says (KUBERNETES_EXEC_INFO) that the plugin may
// talk to the user.
func (c *cli) execInteractive() bool {
	raw := c.opts.Getenv("KUBERNETES_EXEC_INFO")
	if raw == "" {
		return false
	}
	var info clientauthv1.ExecCredential
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return false
	}
	return info.Spec.Interactive
}
