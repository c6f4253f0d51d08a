package oidcdev_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
)

var demoUsers = []oidcdev.User{
	{Username: "alice", Name: "Alice Admin", Groups: []string{"platform-admins", "team-ml"}},
	{Username: "bob", Email: "bob@corp.test", Password: "hunter2"},
}

func startIssuer(t *testing.T, mutate ...func(*oidcdev.Config)) *oidcdev.Issuer {
	t.Helper()
	cfg := oidcdev.Config{Users: demoUsers, Logf: t.Logf}
	for _, m := range mutate {
		m(&cfg)
	}
	iss, err := oidcdev.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := iss.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return iss
}

// noRedirect is a browser stand-in that lets the test look at each hop.
func noRedirect(base *http.Client) *http.Client {
	c := *base
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func verifier(t *testing.T, ctx context.Context, iss *oidcdev.Issuer, clientID string) *oidc.IDTokenVerifier {
	t.Helper()
	p, err := oidc.NewProvider(ctx, iss.IssuerURL())
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	return p.Verifier(&oidc.Config{ClientID: clientID, SupportedSigningAlgs: []string{oidc.RS256}})
}

type idClaims struct {
	Subject           string   `json:"sub"`
	Email             string   `json:"email"`
	EmailVerified     bool     `json:"email_verified"`
	PreferredUsername string   `json:"preferred_username"`
	Name              string   `json:"name"`
	Groups            []string `json:"groups"`
	Audience          any      `json:"aud"`
	AuthorizedParty   string   `json:"azp"`
	IssuedAt          int64    `json:"iat"`
	Expiry            int64    `json:"exp"`
	Nonce             string   `json:"nonce"`
}

func mustClaims(t *testing.T, tok *oidc.IDToken) idClaims {
	t.Helper()
	var c idClaims
	if err := tok.Claims(&c); err != nil {
		t.Fatalf("claims: %v", err)
	}
	return c
}

func checkAlice(t *testing.T, c idClaims) {
	t.Helper()
	if c.Subject != "user-alice" || c.Email != "alice@example.com" || !c.EmailVerified ||
		c.PreferredUsername != "alice" || c.Name != "Alice Admin" {
		t.Errorf("unexpected identity claims: %+v", c)
	}
	if !slices.Equal(c.Groups, []string{"platform-admins", "team-ml"}) {
		t.Errorf("groups = %v", c.Groups)
	}
	if c.IssuedAt == 0 || c.Expiry <= c.IssuedAt {
		t.Errorf("iat/exp = %d/%d", c.IssuedAt, c.Expiry)
	}
}

func TestDiscoveryAndJWKS(t *testing.T) {
	iss := startIssuer(t)
	if !strings.HasPrefix(iss.IssuerURL(), "http://127.0.0.1:") {
		t.Fatalf("issuer URL = %q", iss.IssuerURL())
	}
	if iss.CACertPEM() != nil {
		t.Error("CACertPEM should be nil without TLS")
	}
	var doc struct {
		Issuer        string   `json:"issuer"`
		JWKS          string   `json:"jwks_uri"`
		Token         string   `json:"token_endpoint"`
		Authorization string   `json:"authorization_endpoint"`
		Device        string   `json:"device_authorization_endpoint"`
		Userinfo      string   `json:"userinfo_endpoint"`
		Grants        []string `json:"grant_types_supported"`
		PKCE          []string `json:"code_challenge_methods_supported"`
		Algs          []string `json:"id_token_signing_alg_values_supported"`
		Claims        []string `json:"claims_supported"`
	}
	getJSON(t, http.DefaultClient, iss.IssuerURL()+"/.well-known/openid-configuration", &doc)
	if doc.Issuer != iss.IssuerURL() {
		t.Errorf("issuer = %q", doc.Issuer)
	}
	for _, g := range []string{"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"} {
		if !slices.Contains(doc.Grants, g) {
			t.Errorf("grant %q not advertised: %v", g, doc.Grants)
		}
	}
	if !slices.Equal(doc.PKCE, []string{"S256"}) || !slices.Equal(doc.Algs, []string{"RS256"}) {
		t.Errorf("pkce=%v algs=%v", doc.PKCE, doc.Algs)
	}
	if !slices.Contains(doc.Claims, "groups") {
		t.Errorf("groups not in claims_supported: %v", doc.Claims)
	}
	for _, ep := range []string{doc.Token, doc.Authorization, doc.Device, doc.Userinfo} {
		if !strings.HasPrefix(ep, iss.IssuerURL()+"/") {
			t.Errorf("endpoint %q not under issuer", ep)
		}
	}
	var jwks struct {
		Keys []struct {
			Kty, Alg, Use, Kid, N string
		} `json:"keys"`
	}
	getJSON(t, http.DefaultClient, doc.JWKS, &jwks)
	if len(jwks.Keys) != 1 {
		t.Fatalf("jwks has %d keys", len(jwks.Keys))
	}
	k := jwks.Keys[0]
	if k.Kty != "RSA" || k.Alg != "RS256" || k.Use != "sig" || k.Kid == "" || len(k.N) < 340 {
		t.Errorf("unexpected JWK: kty=%s alg=%s use=%s kid=%q nlen=%d", k.Kty, k.Alg, k.Use, k.Kid, len(k.N))
	}
}

func TestTokenVerifiesWithGoOIDC(t *testing.T) {
	iss := startIssuer(t)
	ctx := t.Context()
	raw, err := iss.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := verifier(t, ctx, iss, "gpuplane").Verify(ctx, raw)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	c := mustClaims(t, tok)
	checkAlice(t, c)
	if !slices.Equal(tok.Audience, []string{"gpuplane"}) {
		t.Errorf("aud = %v", tok.Audience)
	}
	if ttl := time.Until(tok.Expiry); ttl < 55*time.Minute || ttl > 61*time.Minute {
		t.Errorf("default TTL off: %v", ttl)
	}

	// A user without groups still gets an (empty) groups claim, and the
	// email/password defaults apply.
	raw, err = iss.Token(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	tok, err = verifier(t, ctx, iss, "gpuplane").Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := tok.Claims(&m); err != nil {
		t.Fatal(err)
	}
	if g, ok := m["groups"].([]any); !ok || len(g) != 0 {
		t.Errorf("bob groups claim = %#v", m["groups"])
	}
	if m["email"] != "bob@corp.test" {
		t.Errorf("bob email = %v", m["email"])
	}

	if _, err := iss.Token(ctx, "mallory"); !errors.Is(err, oidcdev.ErrUnknownUser) {
		t.Errorf("unknown user: err = %v", err)
	}
}

func TestTokenWithOptions(t *testing.T) {
	iss := startIssuer(t, func(c *oidcdev.Config) { c.ClientID = "api"; c.TokenTTL = 10 * time.Minute })
	ctx := t.Context()
	v := verifier(t, ctx, iss, "api")

	raw, err := iss.TokenWith(ctx, "alice", oidcdev.TokenOptions{Audience: "someone-else"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, raw); err == nil || !strings.Contains(err.Error(), "expected audience") {
		t.Errorf("wrong audience accepted or wrong error: %v", err)
	}

	raw, err = iss.TokenWith(ctx, "alice", oidcdev.TokenOptions{ExpiredAgo: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var expired *oidc.TokenExpiredError
	if _, err := v.Verify(ctx, raw); !errors.As(err, &expired) {
		t.Errorf("expired token: err = %v", err)
	}

	raw, err = iss.TokenWith(ctx, "alice", oidcdev.TokenOptions{TTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := time.Until(tok.Expiry); ttl > 2*time.Minute || ttl < time.Minute {
		t.Errorf("TTL option ignored: %v", ttl)
	}

	raw, err = iss.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	tok, err = v.Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := time.Until(tok.Expiry); ttl > 10*time.Minute || ttl < 9*time.Minute {
		t.Errorf("Config.TokenTTL ignored: %v", ttl)
	}
}

func TestDevTokenEndpoint(t *testing.T) {
	iss := startIssuer(t)
	ctx := t.Context()
	resp, err := http.PostForm(iss.IssuerURL()+oidcdev.DevTokenPath, url.Values{"username": {"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		IDToken   string `json:"id_token"`
		ExpiresIn int64  `json:"expires_in"`
	}
	decode(t, resp, http.StatusOK, &body)
	if body.ExpiresIn != 3600 {
		t.Errorf("expires_in = %d", body.ExpiresIn)
	}
	tok, err := verifier(t, ctx, iss, "gpuplane").Verify(ctx, body.IDToken)
	if err != nil {
		t.Fatal(err)
	}
	checkAlice(t, mustClaims(t, tok))

	resp, err = http.PostForm(iss.IssuerURL()+oidcdev.DevTokenPath, url.Values{"username": {"nobody"}})
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Error string }
	decode(t, resp, http.StatusNotFound, &e)
	if e.Error != "unknown_user" {
		t.Errorf("error = %q", e.Error)
	}

	resp, err = http.Get(iss.IssuerURL() + oidcdev.DevTokenPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Error("GET /dev/token must not mint")
	}
}

// loopbackRedirect is a made-up port: the browser stand-in never follows
// the final redirect, it just reads the code off it.
const loopbackRedirect = "http://127.0.0.1:53682/callback"

func oauthConfig(iss *oidcdev.Issuer, clientID string, scopes ...string) *oauth2.Config {
	return &oauth2.Config{
		ClientID: clientID,
		Endpoint: oauth2.Endpoint{
			AuthURL:       iss.IssuerURL() + "/authorize",
			TokenURL:      iss.IssuerURL() + "/oauth/token",
			DeviceAuthURL: iss.IssuerURL() + "/device_authorization",
			AuthStyle:     oauth2.AuthStyleInParams,
		},
		RedirectURL: loopbackRedirect,
		Scopes:      scopes,
	}
}

// browserLogin follows an authorization URL through the dev login form and
// returns the redirect back to the client.
func browserLogin(t *testing.T, client *http.Client, authURL, username, password string) *url.URL {
	t.Helper()
	resp, err := client.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize: status %d", resp.StatusCode)
	}
	loginURL, err := resp.Location()
	if err != nil || loginURL.Path != oidcdev.LoginPath {
		t.Fatalf("authorize redirected to %v (%v), want the login page", loginURL, err)
	}
	id := loginURL.Query().Get("authRequestID")

	resp, err = client.Get(loginURL.String())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `name="password"`) {
		t.Fatalf("login page: status %d", resp.StatusCode)
	}

	resp, err = client.PostForm(loginURL.Scheme+"://"+loginURL.Host+oidcdev.LoginPath, url.Values{
		"authRequestID": {id}, "username": {username}, "password": {password},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login POST: status %d", resp.StatusCode)
	}
	callback, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	resp, err = client.Get(callback.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("callback: status %d", resp.StatusCode)
	}
	back, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func TestAuthCodePKCEAndRefresh(t *testing.T) {
	iss := startIssuer(t)
	ctx := t.Context()
	conf := oauthConfig(iss, oidcdev.CLIClientID, "openid", "profile", "email", "groups", "offline_access")
	pkce := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("st4te", oauth2.S256ChallengeOption(pkce), oidc.Nonce("n0nce"))

	back := browserLogin(t, noRedirect(http.DefaultClient), authURL, "alice", "alice")
	if got := back.Scheme + "://" + back.Host + back.Path; got != loopbackRedirect {
		t.Fatalf("redirected to %q", got)
	}
	if back.Query().Get("state") != "st4te" || back.Query().Get("code") == "" {
		t.Fatalf("callback query = %q", back.RawQuery)
	}
	code := back.Query().Get("code")

	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption("wrong-"+pkce)); err == nil {
		t.Error("exchange with a wrong PKCE verifier succeeded")
	}
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if tok.RefreshToken == "" || tok.AccessToken == "" {
		t.Fatal("missing access or refresh token")
	}
	rawID, _ := tok.Extra("id_token").(string)

	// The CLI's token is for the API: it verifies with the API client id,
	// and azp names the CLI.
	idt, err := verifier(t, ctx, iss, "gpuplane").Verify(ctx, rawID)
	if err != nil {
		t.Fatalf("verify code-flow id token: %v", err)
	}
	c := mustClaims(t, idt)
	checkAlice(t, c)
	if c.Nonce != "n0nce" || c.AuthorizedParty != oidcdev.CLIClientID {
		t.Errorf("nonce=%q azp=%q", c.Nonce, c.AuthorizedParty)
	}
	if !slices.Contains(idt.Audience, oidcdev.CLIClientID) {
		t.Errorf("aud = %v", idt.Audience)
	}

	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(pkce)); err == nil {
		t.Error("authorization code redeemed twice")
	}

	// Userinfo with the access token carries the same identity.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, iss.IssuerURL()+"/userinfo", nil)
	tok.SetAuthHeader(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ui idClaims
	decode(t, resp, http.StatusOK, &ui)
	if ui.Subject != "user-alice" || !slices.Contains(ui.Groups, "team-ml") {
		t.Errorf("userinfo = %+v", ui)
	}

	// Refresh: a new ID token with the same claims, and rotation retires
	// the old refresh token.
	refreshed, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	rawID2, _ := refreshed.Extra("id_token").(string)
	if rawID2 == "" || rawID2 == rawID {
		t.Fatal("refresh did not return a new ID token")
	}
	idt2, err := verifier(t, ctx, iss, "gpuplane").Verify(ctx, rawID2)
	if err != nil {
		t.Fatalf("verify refreshed id token: %v", err)
	}
	checkAlice(t, mustClaims(t, idt2))
	if refreshed.RefreshToken == "" || refreshed.RefreshToken == tok.RefreshToken {
		t.Error("refresh token was not rotated")
	}
	if _, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
		t.Error("old refresh token still works after rotation")
	}

	// Racing refreshes of one token: exactly one wins, the rest are told
	// invalid_grant (400), never a server error.
	const racers = 6
	statuses := make(chan int, racers)
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() {
			resp, err := http.PostForm(conf.Endpoint.TokenURL, url.Values{
				"grant_type":    {"refresh_token"},
				"refresh_token": {refreshed.RefreshToken},
				"client_id":     {oidcdev.CLIClientID},
			})
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	wins := 0
	for st := range statuses {
		switch st {
		case http.StatusOK:
			wins++
		case http.StatusBadRequest:
		default:
			t.Errorf("racing refresh: status %d", st)
		}
	}
	if wins != 1 {
		t.Errorf("%d racing refreshes succeeded, want 1", wins)
	}
}

func TestAuthCodeForAPIClientAndErrors(t *testing.T) {
	iss := startIssuer(t)
	ctx := t.Context()
	browser := noRedirect(http.DefaultClient)
	conf := oauthConfig(iss, "gpuplane", "openid")
	// Any loopback port is accepted, on localhost too.
	conf.RedirectURL = "http://localhost:1234/callback"
	pkce := oauth2.GenerateVerifier()
	back := browserLogin(t, browser, conf.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)), "bob", "hunter2")
	tok, err := conf.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(pkce))
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken != "" {
		t.Error("refresh token issued without offline_access")
	}
	idt, err := verifier(t, ctx, iss, "gpuplane").Verify(ctx, tok.Extra("id_token").(string))
	if err != nil {
		t.Fatal(err)
	}
	// Claims are present even though only "openid" was requested.
	if c := mustClaims(t, idt); c.Email != "bob@corp.test" || c.Groups == nil {
		t.Errorf("claims = %+v", c)
	}

	// Without PKCE the request is refused before any login happens.
	resp, err := browser.Get(conf.AuthCodeURL("s"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := resp.Location()
	if resp.StatusCode != http.StatusFound || loc == nil || loc.Query().Get("error") != "invalid_request" {
		t.Errorf("no-PKCE authorize: status %d location %v", resp.StatusCode, loc)
	}

	// A non-loopback redirect is refused outright.
	conf.RedirectURL = "https://evil.example/callback"
	resp, err = browser.Get(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc, _ := resp.Location(); resp.StatusCode == http.StatusFound && loc != nil && loc.Host == "evil.example" {
		t.Error("redirected to an unregistered redirect_uri")
	}

	// A wrong password re-renders the form with 401.
	conf.RedirectURL = loopbackRedirect
	resp, err = browser.Get(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(pkce)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loginURL, _ := resp.Location()
	resp, err = browser.PostForm(iss.IssuerURL()+oidcdev.LoginPath, url.Values{
		"authRequestID": {loginURL.Query().Get("authRequestID")}, "username": {"alice"}, "password": {"nope"},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: status %d", resp.StatusCode)
	}
}

func TestDeviceFlow(t *testing.T) {
	iss := startIssuer(t)
	ctx := t.Context()
	conf := oauthConfig(iss, oidcdev.CLIClientID, "openid", "offline_access")
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		t.Fatalf("device authorization: %v", err)
	}
	if da.UserCode == "" || da.DeviceCode == "" || !strings.HasPrefix(da.VerificationURI, iss.IssuerURL()+oidcdev.DevicePath) {
		t.Fatalf("device response: %+v", da)
	}

	poll := func() (int, map[string]any) {
		resp, err := http.PostForm(conf.Endpoint.TokenURL, url.Values{
			"grant_type":  {"urn:ietf:params:oauth:grant-type:device_code"},
			"device_code": {da.DeviceCode},
			"client_id":   {oidcdev.CLIClientID},
		})
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		decode(t, resp, -1, &m)
		return resp.StatusCode, m
	}
	if status, m := poll(); status != http.StatusBadRequest || m["error"] != "authorization_pending" {
		t.Fatalf("pending poll: %d %v", status, m)
	}

	resp, err := http.Get(da.VerificationURIComplete)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), da.UserCode) {
		t.Error("device page does not prefill the user code")
	}

	// People type codes sloppily: lower case, no dash.
	typed := strings.ToLower(strings.ReplaceAll(da.UserCode, "-", ""))
	resp, err = http.PostForm(iss.IssuerURL()+oidcdev.DevicePath, url.Values{
		"user_code": {typed}, "username": {"alice"}, "password": {"wrong"}, "action": {"approve"},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: status %d", resp.StatusCode)
	}
	resp, err = http.PostForm(iss.IssuerURL()+oidcdev.DevicePath, url.Values{
		"user_code": {typed}, "username": {"alice"}, "password": {"alice"}, "action": {"approve"},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("approve: status %d", resp.StatusCode)
	}

	status, m := poll()
	if status != http.StatusOK {
		t.Fatalf("token poll: %d %v", status, m)
	}
	rawID, _ := m["id_token"].(string)
	idt, err := verifier(t, ctx, iss, "gpuplane").Verify(ctx, rawID)
	if err != nil {
		t.Fatalf("verify device id token: %v", err)
	}
	checkAlice(t, mustClaims(t, idt))
	rt, _ := m["refresh_token"].(string)
	if rt == "" {
		t.Fatal("no refresh token from the device grant")
	}

	if status, _ := poll(); status == http.StatusOK {
		t.Error("device code redeemed twice")
	}

	refreshed, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: rt}).Token()
	if err != nil {
		t.Fatalf("refresh after device grant: %v", err)
	}
	idt, err = verifier(t, ctx, iss, "gpuplane").Verify(ctx, refreshed.Extra("id_token").(string))
	if err != nil {
		t.Fatal(err)
	}
	checkAlice(t, mustClaims(t, idt))
}

func TestDeviceFlowDeny(t *testing.T) {
	iss := startIssuer(t)
	ctx := t.Context()
	conf := oauthConfig(iss, oidcdev.CLIClientID, "openid")
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.PostForm(iss.IssuerURL()+oidcdev.DevicePath, url.Values{
		"user_code": {da.UserCode}, "action": {"deny"},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("deny: status %d", resp.StatusCode)
	}
	pollCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = conf.DeviceAccessToken(pollCtx, da)
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "access_denied" {
		t.Errorf("denied device poll: %v", err)
	}
}

func TestTLS(t *testing.T) {
	iss := startIssuer(t, func(c *oidcdev.Config) { c.TLS = true })
	if !strings.HasPrefix(iss.IssuerURL(), "https://127.0.0.1:") {
		t.Fatalf("issuer URL = %q", iss.IssuerURL())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(iss.CACertPEM()) {
		t.Fatal("CACertPEM is not a PEM certificate")
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	ctx := oidc.ClientContext(t.Context(), trusting)

	raw, err := iss.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := verifier(t, ctx, iss, "gpuplane").Verify(ctx, raw)
	if err != nil {
		t.Fatalf("verify over TLS: %v", err)
	}
	checkAlice(t, mustClaims(t, tok))

	// localhost is in the certificate too.
	local := strings.Replace(iss.IssuerURL(), "127.0.0.1", "localhost", 1)
	resp, err := trusting.Get(local + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatalf("https via localhost: %v", err)
	}
	resp.Body.Close()

	// Without the CA the certificate is rejected.
	if _, err := http.Get(iss.IssuerURL() + "/.well-known/openid-configuration"); err == nil {
		t.Error("TLS issuer trusted without its CA")
	}
}

func TestNewValidatesConfig(t *testing.T) {
	cases := map[string]oidcdev.Config{
		"duplicate user":    {Users: []oidcdev.User{{Username: "a"}, {Username: "a"}}},
		"empty username":    {Users: []oidcdev.User{{Username: ""}}},
		"colon in username": {Users: []oidcdev.User{{Username: "a:b"}}},
		"reserved client":   {ClientID: oidcdev.CLIClientID},
		"bad addr":          {Addr: "nonsense"},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			iss, err := oidcdev.New(t.Context(), cfg)
			if err == nil {
				iss.Close()
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	iss, err := oidcdev.New(t.Context(), oidcdev.Config{Users: demoUsers})
	if err != nil {
		t.Fatal(err)
	}
	if err := iss.Close(); err != nil {
		t.Fatal(err)
	}
	if err := iss.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(iss.IssuerURL() + "/.well-known/openid-configuration"); err == nil {
		t.Error("issuer still serving after Close")
	}
}

func getJSON(t *testing.T, c *http.Client, u string, v any) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, resp, http.StatusOK, v)
}

// decode reads a JSON body; wantStatus -1 accepts any status.
func decode(t *testing.T, resp *http.Response, wantStatus int, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if wantStatus >= 0 && resp.StatusCode != wantStatus {
		t.Fatalf("%s %s: status %d, want %d: %.300s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, wantStatus, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %.300s: %v", b, err)
	}
}
