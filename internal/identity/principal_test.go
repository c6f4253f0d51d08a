package identity_test

import (
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
)

func TestBearerToken(t *testing.T) {
	ok := map[string]string{
		"Bearer abc.def.ghi":     "abc.def.ghi",
		"bearer abc":             "abc",
		"BEARER   abc  ":         "abc",
		"  Bearer abc":           "abc",
		"Bearer eyJ-_x.y_z-.s==": "eyJ-_x.y_z-.s==",
	}
	for in, want := range ok {
		got, err := identity.BearerToken(in)
		if err != nil || got != want {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                     "missing bearer token",
		"   ":                  "missing bearer token",
		"Basic dXNlcjpwYXNz":   "authorization header must use the Bearer scheme",
		"Bearer":               "bearer token is empty",
		"Bearer    ":           "bearer token is empty",
		"Bearerabc":            "authorization header must use the Bearer scheme",
		"Bearer abc def":       "malformed bearer token",
		"Token secret-value-1": "authorization header must use the Bearer scheme",
	}
	for in, want := range bad {
		_, err := identity.BearerToken(in)
		e, isErr := errs.As(err)
		if !isErr || e.Kind != errs.KindUnauthenticated || e.PublicMessage() != want {
			t.Errorf("BearerToken(%q) error = %v; want unauthenticated %q", in, err, want)
			continue
		}
		if strings.TrimSpace(in) != "" && strings.Contains(err.Error(), strings.TrimSpace(in)) {
			t.Errorf("error for %q echoes the header", in)
		}
	}
}
