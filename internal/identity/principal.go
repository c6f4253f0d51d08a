// Package identity turns bearer tokens into principals: OIDC ID token
// verification (coreos/go-oidc), the Principal type, and the context plumbing
// the server's interceptors use. It imports nothing from gRPC or HTTP
// frameworks so domain packages can depend on it.
package identity

import (
	"context"
	"strings"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// Principal is the authenticated caller. It deliberately holds no token, so
// logging or printing it can never leak a credential.
type Principal struct {
	Subject  string
	Username string
	Email    string
	Groups   []string
}

// String is for logs and audit lines: username, subject and groups.
func (p Principal) String() string {
	var b strings.Builder
	if p.Username != "" {
		b.WriteString(p.Username)
	} else {
		b.WriteString("<anonymous>")
	}
	b.WriteString(" (sub=")
	b.WriteString(p.Subject)
	if len(p.Groups) > 0 {
		b.WriteString(", groups=")
		b.WriteString(strings.Join(p.Groups, ","))
	}
	b.WriteString(")")
	return b.String()
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal stored by WithPrincipal.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

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
