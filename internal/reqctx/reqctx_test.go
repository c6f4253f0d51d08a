package reqctx_test

import (
	"context"
	"testing"

	"github.com/gpuplane/gpuplane/internal/reqctx"
)

func TestPrincipalContextAndString(t *testing.T) {
	if _, ok := reqctx.PrincipalFrom(context.Background()); ok {
		t.Error("principal found in an empty context")
	}
	p := reqctx.Principal{Subject: "user-alice", Username: "alice@example.com", Email: "alice@example.com", Groups: []string{"a", "b"}}
	got, ok := reqctx.PrincipalFrom(reqctx.WithPrincipal(context.Background(), p))
	if !ok || got.Subject != p.Subject || got.Username != p.Username {
		t.Errorf("round trip = %#v, %v", got, ok)
	}
	if s := p.String(); s != "alice@example.com (sub=user-alice, groups=a,b)" {
		t.Errorf("String() = %q", s)
	}
	if s := (reqctx.Principal{Subject: "x"}).String(); s != "<anonymous> (sub=x)" {
		t.Errorf("String() = %q", s)
	}
}

func TestCorrelationID(t *testing.T) {
	if id := reqctx.CorrelationID(context.Background()); id != "" {
		t.Errorf("empty context has correlation id %q", id)
	}
	if id := reqctx.CorrelationID(reqctx.WithCorrelationID(context.Background(), "abc")); id != "abc" {
		t.Errorf("round trip = %q", id)
	}
	if p := reqctx.System("worker"); p.Subject != "system:worker" || p.Username != "system:worker" {
		t.Errorf("System = %#v", p)
	}
}
