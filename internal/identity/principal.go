// Package identity turns bearer tokens into principals: OIDC ID token
// verification (coreos/go-oidc) and the authorization decisions over a
// caller's Access. The Principal and its context plumbing live in
// internal/reqctx.
package identity

import (
	"strings"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/reqctx"
)

// Principal is the authenticated caller; the type lives in the leaf
// package reqctx, which carries it through context.Context
// (reqctx.WithPrincipal, reqctx.PrincipalFrom).
type Principal = reqctx.Principal

// BearerToken extracts the token from an Authorization header value of the
// form "Bearer <token>" (scheme case-insensitive, RFC 6750). Errors never
// repeat the header, which may hold a credential under another scheme.
func BearerToken(authorization string) (string, error) {
	v := strings.TrimSpace(authorization)
	if v == "" {
		return "", unauthenticated(nil, "missing bearer token")
	}
	scheme, token, ok := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", unauthenticated(nil, "authorization header must use the Bearer scheme")
	}
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return "", unauthenticated(nil, "bearer token is empty")
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", unauthenticated(nil, "malformed bearer token")
	}
	return token, nil
}

func unauthenticated(cause error, msg string) *errs.Error {
	if cause == nil {
		return errs.New(errs.KindUnauthenticated, errs.ReasonUnauthenticated, "%s", msg)
	}
	return errs.Wrap(cause, errs.KindUnauthenticated, errs.ReasonUnauthenticated, "%s", msg)
}
