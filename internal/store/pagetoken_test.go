package store_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/store"
)

type cursor struct {
	CreatedAt time.Time `json:"t"`
	ID        string    `json:"id"`
}

func TestPageTokenRoundTrip(t *testing.T) {
	t.Parallel()
	in := cursor{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ID: "team-a"}
	scope := "ListTeams|parent=departments/x|filter=state=ACTIVE"
	tok := store.EncodePageToken(scope, in)
	if strings.ContainsAny(tok, "+/=") {
		t.Errorf("token %q is not unpadded base64url", tok)
	}
	if strings.Contains(tok, "team-a") {
		t.Errorf("token %q is not opaque", tok)
	}
	var out cursor
	if err := store.DecodePageToken(tok, scope, &out); err != nil {
		t.Fatal(err)
	}
	if !out.CreatedAt.Equal(in.CreatedAt) || out.ID != in.ID {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}

func TestPageTokenEmptyIsFirstPage(t *testing.T) {
	t.Parallel()
	c := cursor{ID: "untouched"}
	if err := store.DecodePageToken("", "s", &c); err != nil || c.ID != "untouched" {
		t.Errorf("empty token: err %v, cursor %+v", err, c)
	}
}

func TestPageTokenRejects(t *testing.T) {
	t.Parallel()
	good := store.EncodePageToken("scope-a", cursor{ID: "x"})
	other := base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"s":"AAAAAAAAAAA","c":{"id":"x"}}`))
	cases := map[string]struct{ token, scope string }{
		"different scope":     {good, "scope-b"},
		"garbage":             {"not a token!", "scope-a"},
		"base64 of garbage":   {base64.RawURLEncoding.EncodeToString([]byte("hello")), "scope-a"},
		"foreign scope hash":  {other, "scope-a"},
		"future version":      {base64.RawURLEncoding.EncodeToString([]byte(`{"v":2,"s":"","c":{}}`)), ""},
		"wrong cursor shape":  {store.EncodePageToken("scope-a", map[string]int{"offset": 3}), "scope-a"},
		"truncated":           {good[:len(good)-3], "scope-a"},
		"cursor not a struct": {store.EncodePageToken("scope-a", 42), "scope-a"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var c cursor
			err := store.DecodePageToken(tc.token, tc.scope, &c)
			e, ok := errs.As(err)
			if !ok {
				t.Fatalf("err = %v, want *errs.Error", err)
			}
			if e.Kind != errs.KindInvalidArgument || e.Reason != errs.ReasonInvalidPageToken {
				t.Errorf("kind/reason = %v/%s", e.Kind, e.Reason)
			}
			if len(e.Violations) != 1 || e.Violations[0].Field != "page_token" {
				t.Errorf("violations = %+v, want one on page_token", e.Violations)
			}
		})
	}
}

func TestPageSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   int32
		want int
	}{{0, 50}, {1, 1}, {50, 50}, {500, 500}, {501, 500}, {1 << 30, 500}} {
		got, err := store.PageSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("PageSize(%d) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	_, err := store.PageSize(-1)
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.KindInvalidArgument || len(e.Violations) != 1 || e.Violations[0].Field != "page_size" {
		t.Errorf("PageSize(-1) err = %#v", err)
	}
}
