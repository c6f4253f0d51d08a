// Package reqctx carries the request context every layer needs — who is
// calling (the authenticated Principal) and which API call this is (the
// correlation id, x-request-id) — through context.Context. It is a leaf:
// it imports only the standard library, so the domain packages, audit and
// the server's interceptors can all depend on it.
package reqctx

import (
	"context"
	"strings"
	"time"
)

// Principal is the authenticated caller. It deliberately holds no token, so
// logging or printing it can never leak a credential.
type Principal struct {
	Subject  string
	Username string
	Email    string
	Groups   []string
	// Expiry is when the caller's credential expires (zero: unknown);
	// long-lived calls such as watches end then.
	Expiry time.Time
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

// System is the principal for changes the platform makes itself
// ("system:worker", "system:expiry", "system:policy/<id>").
func System(component string) Principal {
	return Principal{Subject: "system:" + component, Username: "system:" + component}
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

type correlationKey struct{}

// WithCorrelationID returns ctx carrying the id of the API call being
// served; audit events written under ctx record it.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationID returns the id stored by WithCorrelationID, or "" (work the
// platform does on its own: the worker, expiry).
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}
