package api

import (
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
)

// page is the list skeleton every List handler shares: decode the cursor
// of pageToken (issued for scope; first is the cursor of page one), fetch
// the page after it, convert the rows and mint the next token from the last
// row's cursor.
func page[C, T, P any](pageToken, scope string, first C, validate func(C) error,
	fetch func(after C) ([]T, bool, error), cursor func(T) C, convert func(T) P) ([]P, string, error) {
	after := first
	if err := store.DecodePageToken(pageToken, scope, &after); err != nil {
		return nil, "", err
	}
	if pageToken != "" && validate != nil {
		if err := validate(after); err != nil {
			return nil, "", err
		}
	}
	rows, more, err := fetch(after)
	if err != nil {
		return nil, "", err
	}
	out := make([]P, 0, len(rows))
	for _, r := range rows {
		out = append(out, convert(r))
	}
	next := ""
	if more {
		next = store.EncodePageToken(scope, cursor(rows[len(rows)-1]))
	}
	return out, next, nil
}

// idCursor refuses a cursor that is not an id: tokens are not signed, and
// a NUL byte would fail the query (INTERNAL) instead of a clear 400.
func idCursor(after string) error {
	if names.CheckID(after) != "" {
		e := errs.New(errs.KindInvalidArgument, errs.ReasonInvalidPageToken, "invalid page token")
		e.Violations = []errs.FieldViolation{{Field: "page_token", Description: "the page token is malformed"}}
		return e
	}
	return nil
}
