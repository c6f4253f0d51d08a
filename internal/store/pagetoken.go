package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// Page sizes per AIP-158.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// PageSize turns a request's page_size into a LIMIT: 0 means the default and
// values above the maximum are clamped rather than rejected, as AIP-158 asks.
func PageSize(requested int32) (int, error) {
	switch {
	case requested < 0:
		return 0, errs.InvalidField("page_size", "must not be negative")
	case requested == 0:
		return DefaultPageSize, nil
	case requested > MaxPageSize:
		return MaxPageSize, nil
	}
	return int(requested), nil
}

const pageTokenVersion = 1

// pageToken is the token's JSON form. Tokens are opaque to clients but not
// secret or signed: the cursor only positions a keyset query whose
// authorization filters apply regardless, so a forged cursor reveals
// nothing a client could not list anyway.
type pageToken struct {
	V int             `json:"v"`
	S string          `json:"s"`
	C json.RawMessage `json:"c"`
}

// EncodePageToken returns an opaque token carrying cursor (anything
// encoding/json can round-trip, typically a small struct with the last
// row's sort key) and a fingerprint of scope. scope must capture every
// request parameter that changes which rows are listed or their order
// (method, parent, filter, order_by), but not page_size, which AIP-158 lets
// clients change between pages. It panics if cursor cannot be marshalled,
// which is a programming error.
func EncodePageToken(scope string, cursor any) string {
	c, err := json.Marshal(cursor)
	if err != nil {
		panic(fmt.Sprintf("store: page token cursor %T cannot be marshalled: %v", cursor, err))
	}
	b, err := json.Marshal(pageToken{V: pageTokenVersion, S: scopeHash(scope), C: c})
	if err != nil {
		panic(fmt.Sprintf("store: marshal page token: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodePageToken fills cursor (a pointer) from token. An empty token is the
// first page: cursor is left untouched and the result is nil. A token that
// is malformed or was issued for a different scope is an InvalidArgument
// error with reason INVALID_PAGE_TOKEN on field page_token.
func DecodePageToken(token, scope string, cursor any) error {
	if token == "" {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return invalidPageToken("is malformed", err)
	}
	var pt pageToken
	if err := json.Unmarshal(raw, &pt); err != nil {
		return invalidPageToken("is malformed", err)
	}
	if pt.V != pageTokenVersion {
		return invalidPageToken("was issued by an incompatible server version", nil)
	}
	if pt.S != scopeHash(scope) {
		return invalidPageToken("was issued for a different request; keep the other parameters unchanged when paging", nil)
	}
	// Tokens are not signed: refuse a NUL anywhere in the cursor, which
	// PostgreSQL would reject as text (an INTERNAL error instead of a 400).
	if bytes.Contains(pt.C, []byte(`\u0000`)) {
		return invalidPageToken("is malformed", nil)
	}
	// Strict decoding so a token minted for a different cursor shape is
	// rejected rather than silently read as a partial cursor.
	dec := json.NewDecoder(bytes.NewReader(pt.C))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cursor); err != nil {
		return invalidPageToken("is malformed", err)
	}
	return nil
}

func scopeHash(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return base64.RawURLEncoding.EncodeToString(sum[:8])
}

func invalidPageToken(problem string, cause error) error {
	var e *errs.Error
	if cause != nil {
		e = errs.Wrap(cause, errs.KindInvalidArgument, errs.ReasonInvalidPageToken, "invalid page token")
	} else {
		e = errs.New(errs.KindInvalidArgument, errs.ReasonInvalidPageToken, "invalid page token")
	}
	e.Violations = []errs.FieldViolation{{Field: "page_token", Description: "the page token " + problem}}
	return e
}
