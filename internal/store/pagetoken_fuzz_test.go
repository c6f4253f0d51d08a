package store_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/store"
)

func wantPageTokenError(t *testing.T, what string, err error) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.KindInvalidArgument || e.Reason != errs.ReasonInvalidPageToken {
		t.Fatalf("%s: error %v is not INVALID_ARGUMENT/INVALID_PAGE_TOKEN", what, err)
	}
	if len(e.Violations) != 1 || e.Violations[0].Field != "page_token" {
		t.Fatalf("%s: violations %v, want one on page_token", what, e.Violations)
	}
}

// FuzzDecodePageToken feeds arbitrary tokens (as a client could send them)
// to DecodePageToken: the fuzzed bytes are tried both as the token itself
// and as the JSON inside one, so mutations explore the JSON structure and
// not only the base64 layer. It never panics; a rejection is
// INVALID_PAGE_TOKEN on page_token; an accepted cursor holds no NUL
// (PostgreSQL text would refuse it with an internal error) and survives
// encode -> decode unchanged; and a token is never accepted for another
// request's scope.
func FuzzDecodePageToken(f *testing.F) {
	scope := "ListTeams|parent=departments/x"
	for _, tok := range []string{
		store.EncodePageToken(scope, cursor{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ID: "team-a"}),
		store.EncodePageToken(scope, map[string]any{"id": "x", "extra": 1}),
		store.EncodePageToken(scope, map[string]any{"id": "a\u0000b", "t": "2026-01-01T00:00:00Z"}),
		store.EncodePageToken(scope, map[string]any{"id": 7}),
	} {
		payload, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(payload, scope)
	}
	f.Add([]byte(""), scope)
	f.Add([]byte("not base64!"), scope)
	f.Fuzz(func(t *testing.T, payload []byte, scope string) {
		for _, token := range []string{base64.RawURLEncoding.EncodeToString(payload), string(payload)} {
			var got cursor
			err := store.DecodePageToken(token, scope, &got)
			if err != nil {
				wantPageTokenError(t, "DecodePageToken", err)
				continue
			}
			if token == "" {
				if got != (cursor{}) {
					t.Fatalf("empty token changed the cursor to %+v", got)
				}
				continue
			}
			if strings.IndexByte(got.ID, 0) >= 0 || !utf8.ValidString(got.ID) {
				t.Fatalf("token %q decoded to a cursor id with NUL or invalid UTF-8: %q", token, got.ID)
			}
			var again cursor
			if err := store.DecodePageToken(store.EncodePageToken(scope, got), scope, &again); err != nil {
				t.Fatalf("re-encoded cursor %+v rejected: %v", got, err)
			}
			if !again.CreatedAt.Equal(got.CreatedAt) || again.ID != got.ID {
				t.Fatalf("round trip changed the cursor: %+v -> %+v", got, again)
			}
			var other cursor
			wantPageTokenError(t, "token for another scope", store.DecodePageToken(token, scope+"|filter=x", &other))
		}
	})
}

// FuzzPageTokenRoundTrip: any cursor a list can produce comes back exactly
// for the same scope and is refused for any other; a cursor holding NUL is
// refused rather than passed on to PostgreSQL.
func FuzzPageTokenRoundTrip(f *testing.F) {
	f.Add("ListTeams", "team-a", int64(1767225600123456789))
	f.Add("", "", int64(0))
	f.Add("ListAuditEvents|filter=resource = \"teams/a*\"", "évènement ✓", int64(-1))
	f.Add("s", "a\x00b", int64(42))
	f.Fuzz(func(t *testing.T, scope, id string, nanos int64) {
		in := cursor{CreatedAt: time.Unix(0, nanos).UTC(), ID: id}
		tok := store.EncodePageToken(scope, in)
		if tok == "" || strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Fatalf("token %q is not unpadded base64url", tok)
		}
		var out cursor
		err := store.DecodePageToken(tok, scope, &out)
		switch {
		case strings.IndexByte(id, 0) >= 0:
			wantPageTokenError(t, "cursor with NUL", err)
			return
		case err != nil:
			t.Fatalf("own token rejected: %v", err)
		case !out.CreatedAt.Equal(in.CreatedAt):
			t.Fatalf("time %v came back as %v", in.CreatedAt, out.CreatedAt)
		case utf8.ValidString(id) && out.ID != id:
			t.Fatalf("id %q came back as %q", id, out.ID)
		case !utf8.ValidString(out.ID):
			t.Fatalf("id came back as invalid UTF-8 %q", out.ID)
		}
		wantPageTokenError(t, "token for another scope", store.DecodePageToken(tok, scope+"x", &out))
	})
}
