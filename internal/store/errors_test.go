package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

func TestClassifyRealErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	mustExec(t, pool, `CREATE TABLE parent (id int PRIMARY KEY, name text NOT NULL CONSTRAINT parent_name_key UNIQUE)`)
	mustExec(t, pool, `CREATE TABLE child (id int PRIMARY KEY,
		parent_id int NOT NULL CONSTRAINT child_parent_fk REFERENCES parent(id),
		gpus int CONSTRAINT child_gpus_nonneg CHECK (gpus >= 0))`)
	mustExec(t, pool, `INSERT INTO parent VALUES (1, 'a')`)
	mustExec(t, pool, `INSERT INTO child VALUES (1, 1, 0)`)

	cases := []struct {
		name       string
		sql        string
		kind       errs.Kind
		reason     string
		constraint string
		column     string
	}{
		{"unique", `INSERT INTO parent VALUES (2, 'a')`, errs.KindAlreadyExists, errs.ReasonAlreadyExists, "parent_name_key", ""},
		// A parent deleted under a child being written: NOT_FOUND, never
		// INTERNAL. (Deletes that meet children say so themselves.)
		{"fk missing parent", `INSERT INTO child VALUES (2, 99, 0)`, errs.KindNotFound, store.ReasonParentGone, "child_parent_fk", ""},
		{"check", `INSERT INTO child VALUES (3, 1, -1)`, errs.KindInvalidArgument, errs.ReasonInvalidField, "child_gpus_nonneg", ""},
		{"not null", `INSERT INTO parent VALUES (3, NULL)`, errs.KindInvalidArgument, errs.ReasonInvalidField, "", "name"},
		{"invalid text", `SELECT 'nope'::uuid`, errs.KindInvalidArgument, errs.ReasonInvalidField, "", ""},
		{"division by zero", `SELECT 1/0`, errs.KindInvalidArgument, errs.ReasonInvalidField, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, raw := pool.Exec(ctx, tc.sql)
			if raw == nil {
				t.Fatalf("%s succeeded", tc.sql)
			}
			err := store.Classify(fmt.Errorf("repo: %w", raw))
			e, ok := errs.As(err)
			if !ok {
				t.Fatalf("Classify(%v) = %T, want *errs.Error", raw, err)
			}
			if e.Kind != tc.kind || e.Reason != tc.reason {
				t.Errorf("kind/reason = %v/%s, want %v/%s", e.Kind, e.Reason, tc.kind, tc.reason)
			}
			if got := e.Metadata[store.MetaConstraint]; got != tc.constraint {
				t.Errorf("constraint metadata = %q, want %q", got, tc.constraint)
			}
			if got := e.Metadata[store.MetaColumn]; got != tc.column {
				t.Errorf("column metadata = %q, want %q", got, tc.column)
			}
			if store.ConstraintName(err) != tc.constraint {
				t.Errorf("ConstraintName = %q, want %q", store.ConstraintName(err), tc.constraint)
			}
			if tc.constraint != "" && strings.Contains(e.PublicMessage(), tc.constraint) {
				t.Errorf("public message %q leaks the constraint name", e.PublicMessage())
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				t.Error("original PgError is not kept as the cause")
			}
		})
	}
}

func TestClassifyPassThrough(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)

	if store.Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
	domain := errs.NotFound("team")
	if got := store.Classify(domain); got != domain {
		t.Errorf("Classify(domain error) = %v, want it unchanged", got)
	}
	if got := store.Classify(context.Canceled); got != context.Canceled {
		t.Errorf("Classify(context.Canceled) = %v", got)
	}
	other := &pgconn.PgError{Code: "XX000", Message: "internal"}
	if got := store.Classify(other); got != error(other) {
		t.Errorf("Classify(XX000) = %v, want unchanged", got)
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET statement_timeout = '50ms'"); err != nil {
		t.Fatal(err)
	}
	_, raw := conn.Exec(ctx, "SELECT pg_sleep(5)")
	if store.SQLState(raw) != "57014" {
		t.Fatalf("want query_canceled, got %v", raw)
	}
	if got := store.Classify(raw); got != raw {
		t.Errorf("Classify(57014) = %v, want unchanged", got)
	}
	if _, err := conn.Exec(ctx, "RESET statement_timeout"); err != nil {
		t.Fatal(err)
	}
}

func TestClassifyRetryable(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"40001", "40P01"} {
		raw := &pgconn.PgError{Code: code}
		err := store.Classify(raw)
		if !store.IsRetryable(err) {
			t.Errorf("%s: classified error not retryable", code)
		}
		if e, ok := errs.As(err); !ok || e.Kind != errs.KindAborted || e.Reason != store.ReasonConcurrencyConflict {
			t.Errorf("%s: Classify = %#v", code, err)
		}
	}
	if store.IsRetryable(&pgconn.PgError{Code: "23505"}) || store.IsRetryable(errors.New("x")) || store.IsRetryable(nil) {
		t.Error("IsRetryable true for a non-retryable error")
	}
	if store.SQLState(errors.New("x")) != "" || store.ConstraintName(nil) != "" {
		t.Error("helpers should return empty strings for non-Postgres errors")
	}
}

// TestClassifyUnavailable: a database that cannot be used is UNAVAILABLE
// with a retry hint, told apart by error type and SQLSTATE: a refused
// connection, a backend terminated under a session (57P01), the closed
// connection afterwards, and the SQLSTATEs of a starting, stopping or full
// server. Errors of a working database are not.
func TestClassifyUnavailable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	unavailable := func(t *testing.T, what string, raw error) {
		t.Helper()
		if raw == nil {
			t.Fatalf("%s: no error", what)
		}
		if !store.IsUnavailable(raw) {
			t.Errorf("%s: IsUnavailable(%v) = false", what, raw)
		}
		e, ok := errs.As(store.Classify(fmt.Errorf("repo: %w", raw)))
		if !ok || e.Kind != errs.KindUnavailable || e.Reason != store.ReasonDatabaseUnavailable || e.RetryAfter <= 0 {
			t.Errorf("%s: Classify(%v) = %#v", what, raw, e)
		}
	}

	// Nothing listens on a port that was just closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, raw := store.Open(ctx, "postgres://nobody@"+addr+"/none?connect_timeout=2", 1)
	unavailable(t, "refused connection", raw)

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	_, raw = conn.Exec(ctx, "SELECT 1")
	unavailable(t, "terminated backend", raw)
	_, raw = conn.Exec(ctx, "SELECT 1")
	unavailable(t, "closed connection", raw)

	for _, code := range []string{"08006", "08001", "57P01", "57P02", "57P03", "53300"} {
		unavailable(t, code, &pgconn.PgError{Code: code})
	}
	for _, raw := range []error{&pgconn.PgError{Code: "23505"}, &pgconn.PgError{Code: "57014"}, context.Canceled,
		fmt.Errorf("x: %w", context.DeadlineExceeded), errors.New("plain")} {
		if store.IsUnavailable(raw) {
			t.Errorf("IsUnavailable(%v) = true", raw)
		}
	}
}
