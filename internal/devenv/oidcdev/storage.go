package oidcdev

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// user is a demo account with its defaults applied.
type user struct {
	User
	subject string
}

func normalizeUsers(in []User) (map[string]*user, error) {
	out := make(map[string]*user, len(in))
	for _, u := range in {
		if err := validUsername(u.Username); err != nil {
			return nil, err
		}
		if _, dup := out[u.Username]; dup {
			return nil, fmt.Errorf("oidcdev: duplicate user %q", u.Username)
		}
		if u.Email == "" {
			u.Email = u.Username + "@" + defaultEmailDomain
		}
		if u.Name == "" {
			u.Name = u.Username
		}
		if u.Password == "" {
			u.Password = u.Username
		}
		u.Groups = slices.Clone(u.Groups)
		out[u.Username] = &user{User: u, subject: Subject(u.Username)}
	}
	return out, nil
}

// validUsername keeps usernames to a conservative alphabet: the subject ends
// up inside op's "tokenID:subject" bearer token format and in URLs and HTML.
func validUsername(name string) error {
	if name == "" || len(name) > maxUsernameLength {
		return fmt.Errorf("oidcdev: username must be 1-%d characters", maxUsernameLength)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.' || r == '@'
		if !ok {
			return fmt.Errorf("oidcdev: username %q may only contain letters, digits, '-', '_', '.', '@'", name)
		}
	}
	return nil
}

func (u *user) setUserinfo(info *oidc.UserInfo) {
	info.Subject = u.subject
	info.PreferredUsername = u.Username
	info.Name = u.Name
	info.Email = u.Email
	// The dev issuer vouches for its demo addresses; kube-apiserver refuses
	// an email username whose email_verified is false.
	info.EmailVerified = true
	groups := slices.Clone(u.Groups)
	if groups == nil {
		groups = []string{}
	}
	info.AppendClaims("groups", groups)
}

// signingKey is the issuer's single RS256 key; it is both op.SigningKey and,
// through publicKey, the op.Key published in the JWKS.
type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func newSigningKey(key *rsa.PrivateKey) (*signingKey, error) {
	thumb, err := (&jose.JSONWebKey{Key: &key.PublicKey}).Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("oidcdev: key thumbprint: %w", err)
	}
	return &signingKey{id: base64.RawURLEncoding.EncodeToString(thumb), key: key}, nil
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Key() any                                    { return k.key }
func (k *signingKey) ID() string                                  { return k.id }

type publicKey struct{ k *signingKey }

func (p publicKey) ID() string                         { return p.k.id }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return &p.k.key.PublicKey }

type accessToken struct {
	id       string
	subject  string
	clientID string
	audience []string
	scopes   []string
	expires  time.Time
}

type refreshToken struct {
	token         string
	subject       string
	clientID      string
	audience      []string
	scopes        []string
	amr           []string
	authTime      time.Time
	expires       time.Time
	accessTokenID string
}

type deviceAuthorization struct {
	clientID string
	userCode string
	scopes   []string
	expires  time.Time
	done     bool
	denied   bool
	subject  string
	authTime time.Time
}

// storage implements op.Storage and op.DeviceAuthorizationStorage in memory.
// Users, clients and the key are fixed at construction; everything else is
// guarded by mu. Values handed to op are copies, because op reads them after
// the lock is released while a login may be mutating the original.
type storage struct {
	issuer   string
	tokenTTL time.Duration
	key      *signingKey
	clients  map[string]*client
	byName   map[string]*user
	bySub    map[string]*user

	mu            sync.Mutex
	authRequests  map[string]*authRequest
	codes         map[string]string // code -> auth request id
	accessTokens  map[string]*accessToken
	refreshTokens map[string]*refreshToken
	devices       map[string]*deviceAuthorization // device code ->
	userCodes     map[string]string               // normalized user code -> device code
}

var (
	_ op.Storage                    = (*storage)(nil)
	_ op.DeviceAuthorizationStorage = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest  = (*storage)(nil)
)

func newStorage(issuer, apiClientID string, ttl time.Duration, users map[string]*user, key *signingKey) *storage {
	s := &storage{
		issuer:        issuer,
		tokenTTL:      ttl,
		key:           key,
		byName:        users,
		bySub:         make(map[string]*user, len(users)),
		authRequests:  map[string]*authRequest{},
		codes:         map[string]string{},
		accessTokens:  map[string]*accessToken{},
		refreshTokens: map[string]*refreshToken{},
		devices:       map[string]*deviceAuthorization{},
		userCodes:     map[string]string{},
	}
	for _, u := range users {
		s.bySub[u.subject] = u
	}
	s.clients = map[string]*client{
		apiClientID: newClient(issuer, apiClientID, nil, ttl),
		// The CLI's tokens are meant for the API, so they name it as an
		// audience too; azp keeps saying who obtained them.
		CLIClientID: newClient(issuer, CLIClientID, []string{apiClientID}, ttl),
	}
	return s
}

func (s *storage) userByName(name string) (*user, bool) {
	u, ok := s.byName[name]
	return u, ok
}

func (s *storage) userBySubject(sub string) (*user, bool) {
	u, ok := s.bySub[sub]
	return u, ok
}

// checkPassword compares in constant time; an unknown user still costs a
// comparison so timing does not reveal which usernames exist.
func (s *storage) checkPassword(username, password string) (*user, bool) {
	u, ok := s.byName[username]
	want := "\x00unknown-user"
	if ok {
		want = u.Password
	}
	match := constantTimeEqual(password, want)
	return u, ok && match
}

func newOpaque() string { return rand.Text() + rand.Text() }

// ---- auth requests (authorization code grant) ----

func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	c, ok := s.clients[req.ClientID]
	if !ok {
		return nil, oidc.ErrInvalidClient().WithDescription("unknown client")
	}
	// op only insists on PKCE at the token endpoint; refusing here keeps a
	// public client from ever getting a code that could be redeemed without.
	if req.ResponseType == oidc.ResponseTypeCode &&
		(req.CodeChallenge == "" || req.CodeChallengeMethod != oidc.CodeChallengeMethodS256) {
		return nil, oidc.ErrInvalidRequest().WithDescription("PKCE with code_challenge_method S256 is required")
	}
	now := time.Now()
	ar := &authRequest{
		id:           rand.Text(),
		createdAt:    now,
		clientID:     req.ClientID,
		redirectURI:  req.RedirectURI,
		state:        req.State,
		nonce:        req.Nonce,
		scopes:       slices.Clone([]string(req.Scopes)),
		audience:     slices.Clone(c.extraAudience),
		responseType: req.ResponseType,
		responseMode: req.ResponseMode,
		loginHint:    req.LoginHint,
	}
	if req.CodeChallenge != "" {
		ar.challenge = &oidc.CodeChallenge{Challenge: req.CodeChallenge, Method: req.CodeChallengeMethod}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(now)
	s.authRequests[ar.id] = ar
	return ar.clone(), nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, ok := s.authRequests[id]
	if !ok {
		return nil, errors.New("auth request not found")
	}
	return ar.clone(), nil
}

// authRequestForLogin is AuthRequestByID for the login page, which needs
// the concrete type.
func (s *storage) authRequestForLogin(id string) (*authRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, ok := s.authRequests[id]
	if !ok || ar.done {
		return nil, false
	}
	return ar.clone(), true
}

func (s *storage) completeAuthRequest(id, subject string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, ok := s.authRequests[id]
	if !ok {
		return errors.New("auth request not found or expired")
	}
	if ar.done {
		return errors.New("auth request already completed")
	}
	ar.subject = subject
	ar.authTime = time.Now()
	ar.done = true
	return nil
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.codes[code]
	if !ok {
		return nil, errors.New("unknown or used code")
	}
	ar, ok := s.authRequests[id]
	if !ok || !ar.done {
		return nil, errors.New("unknown or used code")
	}
	return ar.clone(), nil
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, ok := s.authRequests[id]
	if !ok {
		return errors.New("auth request not found")
	}
	if ar.code != "" {
		delete(s.codes, ar.code)
	}
	ar.code = code
	s.codes[code] = id
	return nil
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ar, ok := s.authRequests[id]; ok {
		delete(s.codes, ar.code)
		delete(s.authRequests, id)
	}
	return nil
}

// purgeLocked drops expired state so a long-running dev server does not grow
// without bound.
func (s *storage) purgeLocked(now time.Time) {
	for id, ar := range s.authRequests {
		if now.Sub(ar.createdAt) > authRequestTTL {
			delete(s.codes, ar.code)
			delete(s.authRequests, id)
		}
	}
	for id, at := range s.accessTokens {
		if now.After(at.expires) {
			delete(s.accessTokens, id)
		}
	}
	for tok, rt := range s.refreshTokens {
		if now.After(rt.expires) {
			delete(s.refreshTokens, tok)
		}
	}
	for dc, d := range s.devices {
		// Kept a little past expiry so a late poll is told expired_token
		// rather than access_denied.
		if now.After(d.expires.Add(time.Minute)) {
			delete(s.userCodes, normalizeUserCode(d.userCode))
			delete(s.devices, dc)
		}
	}
}

// ---- tokens ----

// tokenRequestInfo extracts what every request type op hands us has in
// common; op passes auth requests, refresh requests and device states.
func tokenRequestInfo(req op.TokenRequest) (clientID string, amr []string, authTime time.Time, err error) {
	r, ok := req.(interface {
		GetClientID() string
		GetAMR() []string
		GetAuthTime() time.Time
	})
	if !ok {
		return "", nil, time.Time{}, oidc.ErrUnsupportedGrantType()
	}
	return r.GetClientID(), r.GetAMR(), r.GetAuthTime(), nil
}

func (s *storage) newAccessTokenLocked(req op.TokenRequest, clientID string, now time.Time) *accessToken {
	at := &accessToken{
		id:       rand.Text(),
		subject:  req.GetSubject(),
		clientID: clientID,
		audience: slices.Clone(req.GetAudience()),
		scopes:   slices.Clone(req.GetScopes()),
		expires:  now.Add(s.tokenTTL),
	}
	s.accessTokens[at.id] = at
	return at
}

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	clientID, _, _, err := tokenRequestInfo(req)
	if err != nil {
		return "", time.Time{}, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(now)
	at := s.newAccessTokenLocked(req, clientID, now)
	return at.id, at.expires, nil
}

func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	clientID, amr, authTime, err := tokenRequestInfo(req)
	if err != nil {
		return "", "", time.Time{}, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(now)
	if current != "" {
		old, ok := s.refreshTokens[current]
		if !ok || old.clientID != clientID {
			// Lost a race with a concurrent refresh of the same token; an
			// oidc.Error keeps op from answering 500.
			return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("refresh token is invalid or already used")
		}
		// Rotation: the presented refresh token and its access token die
		// here, so a leaked old refresh token is useless.
		delete(s.refreshTokens, current)
		delete(s.accessTokens, old.accessTokenID)
		amr, authTime = old.amr, old.authTime
	}
	at := s.newAccessTokenLocked(req, clientID, now)
	rt := &refreshToken{
		token:         newOpaque(),
		subject:       at.subject,
		clientID:      clientID,
		audience:      at.audience,
		scopes:        at.scopes,
		amr:           slices.Clone(amr),
		authTime:      authTime,
		expires:       now.Add(refreshTokenTTL),
		accessTokenID: at.id,
	}
	s.refreshTokens[rt.token] = rt
	return at.id, rt.token, at.expires, nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refreshTokens[token]
	if !ok || time.Now().After(rt.expires) {
		return nil, op.ErrInvalidRefreshToken
	}
	if _, ok := s.bySub[rt.subject]; !ok {
		return nil, op.ErrInvalidRefreshToken
	}
	return &refreshTokenRequest{
		subject:  rt.subject,
		clientID: rt.clientID,
		audience: slices.Clone(rt.audience),
		scopes:   slices.Clone(rt.scopes),
		amr:      slices.Clone(rt.amr),
		authTime: rt.authTime,
	}, nil
}

func (s *storage) TerminateSession(_ context.Context, userID, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.accessTokens {
		if at.subject == userID && at.clientID == clientID {
			delete(s.accessTokens, id)
		}
	}
	for tok, rt := range s.refreshTokens {
		if rt.subject == userID && rt.clientID == clientID {
			delete(s.refreshTokens, tok)
		}
	}
	return nil
}

func (s *storage) RevokeToken(_ context.Context, tokenOrID, _ string, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rt, ok := s.refreshTokens[tokenOrID]; ok {
		if rt.clientID != clientID {
			return oidc.ErrInvalidClient().WithDescription("token was not issued to this client")
		}
		delete(s.refreshTokens, tokenOrID)
		delete(s.accessTokens, rt.accessTokenID)
		return nil
	}
	if at, ok := s.accessTokens[tokenOrID]; ok {
		if at.clientID != clientID {
			return oidc.ErrInvalidClient().WithDescription("token was not issued to this client")
		}
		delete(s.accessTokens, tokenOrID)
	}
	// RFC 7009: an unknown token is not an error.
	return nil
}

func (s *storage) GetRefreshTokenInfo(_ context.Context, clientID, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refreshTokens[token]
	if !ok || rt.clientID != clientID {
		return "", "", op.ErrInvalidRefreshToken
	}
	return rt.subject, rt.token, nil
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.key, nil }

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{s.key}}, nil
}

// ---- clients and claims ----

func (s *storage) GetClientByClientID(_ context.Context, clientID string) (op.Client, error) {
	c, ok := s.clients[clientID]
	if !ok {
		return nil, errors.New("unknown client")
	}
	return c, nil
}

func (s *storage) AuthorizeClientIDSecret(context.Context, string, string) error {
	return errors.New("the dev issuer has only public clients")
}

// SetUserinfoFromScopes is deprecated in op; SetUserinfoFromRequest does the
// work.
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills every ID token with the full identity,
// whatever scopes were asked for: the API server and kube-apiserver read
// email and groups from the ID token, and a dev issuer should not make each
// client rediscover which scopes unlock them.
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	u, ok := s.userBySubject(req.GetSubject())
	if !ok {
		return errors.New("user no longer exists")
	}
	u.setUserinfo(info)
	return nil
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, subject, _ string) error {
	s.mu.Lock()
	at, ok := s.accessTokens[tokenID]
	valid := ok && at.subject == subject && time.Now().Before(at.expires)
	s.mu.Unlock()
	if !valid {
		return errors.New("access token invalid or expired")
	}
	u, ok := s.userBySubject(subject)
	if !ok {
		return errors.New("user no longer exists")
	}
	u.setUserinfo(info)
	return nil
}

func (s *storage) SetIntrospectionFromToken(_ context.Context, resp *oidc.IntrospectionResponse, tokenID, subject, clientID string) error {
	s.mu.Lock()
	at, ok := s.accessTokens[tokenID]
	var cp accessToken
	if ok {
		cp = *at
	}
	s.mu.Unlock()
	if !ok || cp.subject != subject || time.Now().After(cp.expires) {
		return errors.New("access token invalid or expired")
	}
	if !slices.Contains(cp.audience, clientID) && cp.clientID != clientID {
		return errors.New("token not issued to this client")
	}
	u, ok := s.userBySubject(subject)
	if !ok {
		return errors.New("user no longer exists")
	}
	info := new(oidc.UserInfo)
	u.setUserinfo(info)
	resp.SetUserInfo(info)
	resp.Active = true
	resp.Scope = cp.scopes
	resp.ClientID = cp.clientID
	resp.Audience = cp.audience
	resp.Expiration = oidc.FromTime(cp.expires)
	return nil
}

// GetPrivateClaimsFromScopes adds nothing: access tokens are opaque here.
func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("the dev issuer has no client keys (JWT profile is not supported)")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("JWT profile grant is not supported by the dev issuer")
}

func (s *storage) Health(context.Context) error { return nil }

// ---- device authorization grant ----

func normalizeUserCode(code string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(code) {
		if r != '-' && r != ' ' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, deviceCode, userCode string, expires time.Time, scopes []string) error {
	if _, ok := s.clients[clientID]; !ok {
		return errors.New("unknown client")
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purgeLocked(now)
	key := normalizeUserCode(userCode)
	if _, dup := s.userCodes[key]; dup {
		return op.ErrDuplicateUserCode
	}
	s.devices[deviceCode] = &deviceAuthorization{
		clientID: clientID,
		userCode: userCode,
		scopes:   slices.Clone(scopes),
		expires:  expires,
	}
	s.userCodes[key] = deviceCode
	return nil
}

func (s *storage) GetDeviceAuthorizatonState(_ context.Context, clientID, deviceCode string) (*op.DeviceAuthorizationState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[deviceCode]
	if !ok || d.clientID != clientID {
		return nil, errors.New("unknown device code")
	}
	state := &op.DeviceAuthorizationState{
		ClientID: d.clientID,
		Audience: slices.Clone(s.clients[d.clientID].extraAudience),
		Scopes:   slices.Clone(d.scopes),
		Expires:  d.expires,
		Done:     d.done,
		Denied:   d.denied,
		Subject:  d.subject,
		AuthTime: d.authTime,
	}
	if d.done {
		state.AMR = []string{passwordAMR}
	}
	// A finished device code is answered once: the next poll with the same
	// code finds nothing, so the code cannot be replayed for more tokens.
	if d.done || d.denied {
		delete(s.userCodes, normalizeUserCode(d.userCode))
		delete(s.devices, deviceCode)
	}
	return state, nil
}

// pendingDevice reports whether userCode names a device authorization that
// still awaits the user.
func (s *storage) pendingDevice(userCode string) (clientID string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deviceByUserCodeLocked(userCode)
	if !ok {
		return "", false
	}
	return d.clientID, true
}

func (s *storage) deviceByUserCodeLocked(userCode string) (*deviceAuthorization, bool) {
	dc, ok := s.userCodes[normalizeUserCode(userCode)]
	if !ok {
		return nil, false
	}
	d, ok := s.devices[dc]
	if !ok || d.done || d.denied || time.Now().After(d.expires) {
		return nil, false
	}
	return d, true
}

func (s *storage) completeDevice(userCode, subject string, approve bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deviceByUserCodeLocked(userCode)
	if !ok {
		return errors.New("unknown, expired or already used code")
	}
	if !approve {
		d.denied = true
		return nil
	}
	d.subject = subject
	d.authTime = time.Now()
	d.done = true
	return nil
}
