package oidcdev

import (
	"crypto/subtle"
	"net/url"
	"slices"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// authRequest is one authorization code flow, from /authorize until the code
// is redeemed.
type authRequest struct {
	id           string
	createdAt    time.Time
	clientID     string
	redirectURI  string
	state        string
	nonce        string
	scopes       []string
	audience     []string
	responseType oidc.ResponseType
	responseMode oidc.ResponseMode
	challenge    *oidc.CodeChallenge
	loginHint    string
	code         string

	subject  string
	authTime time.Time
	done     bool
}

var _ op.AuthRequest = (*authRequest)(nil)

func (a *authRequest) clone() *authRequest {
	c := *a
	c.scopes = slices.Clone(a.scopes)
	c.audience = slices.Clone(a.audience)
	if a.challenge != nil {
		ch := *a.challenge
		c.challenge = &ch
	}
	return &c
}

func (a *authRequest) GetID() string  { return a.id }
func (a *authRequest) GetACR() string { return "" }
func (a *authRequest) GetAMR() []string {
	if a.done {
		return []string{passwordAMR}
	}
	return nil
}

// GetAudience includes the client itself; op would add it anyway, but the
// access token records built from this request should say so too.
func (a *authRequest) GetAudience() []string {
	return appendMissing(slices.Clone(a.audience), a.clientID)
}
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

// refreshTokenRequest is what a refresh token stands for when redeemed.
type refreshTokenRequest struct {
	subject  string
	clientID string
	audience []string
	scopes   []string
	amr      []string
	authTime time.Time
}

var _ op.RefreshTokenRequest = (*refreshTokenRequest)(nil)

func (r *refreshTokenRequest) GetAMR() []string                 { return r.amr }
func (r *refreshTokenRequest) GetAudience() []string            { return r.audience }
func (r *refreshTokenRequest) GetAuthTime() time.Time           { return r.authTime }
func (r *refreshTokenRequest) GetClientID() string              { return r.clientID }
func (r *refreshTokenRequest) GetScopes() []string              { return r.scopes }
func (r *refreshTokenRequest) GetSubject() string               { return r.subject }
func (r *refreshTokenRequest) SetCurrentScopes(scopes []string) { r.scopes = scopes }

// mintRequest drives op.CreateIDToken for Issuer.Token.
type mintRequest struct {
	subject  string
	clientID string
	scopes   []string
	authTime time.Time
}

var _ op.IDTokenRequest = (*mintRequest)(nil)

func (m *mintRequest) GetAMR() []string       { return []string{passwordAMR} }
func (m *mintRequest) GetAudience() []string  { return []string{m.clientID} }
func (m *mintRequest) GetAuthTime() time.Time { return m.authTime }
func (m *mintRequest) GetClientID() string    { return m.clientID }
func (m *mintRequest) GetScopes() []string    { return m.scopes }
func (m *mintRequest) GetSubject() string     { return m.subject }

// client is a public native client (RFC 8252): no secret, PKCE, loopback
// redirects on any port.
type client struct {
	id            string
	loginBase     string
	extraAudience []string
	idTokenTTL    time.Duration
}

var _ op.Client = (*client)(nil)

func newClient(issuer, id string, extraAudience []string, ttl time.Duration) *client {
	return &client{id: id, loginBase: issuer, extraAudience: extraAudience, idTokenTTL: ttl}
}

func (c *client) GetID() string { return c.id }

// RedirectURIs are matched by op ignoring the port for loopback hosts, and in
// fact only path and query are compared for a loopback redirect, so these
// admit http://127.0.0.1:<any>/callback and http://localhost:<any>/callback.
func (c *client) RedirectURIs() []string {
	return []string{
		"http://127.0.0.1" + callbackPath,
		"http://localhost" + callbackPath,
		"http://[::1]" + callbackPath,
	}
}
func (c *client) PostLogoutRedirectURIs() []string    { return c.RedirectURIs() }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeNative }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodNone }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration      { return c.idTokenTTL }
func (c *client) DevMode() bool                       { return false }
func (c *client) IsScopeAllowed(scope string) bool    { return scope == GroupsScope }
func (c *client) ClockSkew() time.Duration            { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// IDTokenUserinfoClaimsAssertion is true so op keeps profile/email scopes
// for the ID token even when an access token is issued alongside; otherwise
// code and refresh grants would mint thinner ID tokens than Token does.
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }

func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken, oidc.GrantTypeDeviceCode}
}

func (c *client) LoginURL(authRequestID string) string {
	return c.loginBase + LoginPath + "?authRequestID=" + url.QueryEscape(authRequestID)
}

func appendMissing(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
