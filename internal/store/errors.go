package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// ReasonConcurrencyConflict is the ErrorInfo reason for a transaction that
// PostgreSQL kept aborting (serialization failure or deadlock) until InTx
// ran out of attempts. The client may retry the whole request.
const ReasonConcurrencyConflict = "CONCURRENCY_CONFLICT"

// ReasonDatabaseUnavailable is the ErrorInfo reason of a call that could
// not reach PostgreSQL (down, restarting, refusing connections); the client
// retries after RetryInfo's delay (Retry-After over HTTP).
const ReasonDatabaseUnavailable = "DATABASE_UNAVAILABLE"

// UnavailableRetryAfter is the retry hint of ReasonDatabaseUnavailable.
const UnavailableRetryAfter = time.Second

// ReasonParentGone is the ErrorInfo reason of a write that referred to a
// resource deleted by a concurrent call (a member or request for a team
// deleted meanwhile).
const ReasonParentGone = "PARENT_NOT_FOUND"

// Metadata keys set by Classify.
const (
	MetaConstraint = "constraint"
	MetaColumn     = "column"
)

// SQLState returns the SQLSTATE of the PostgreSQL error in err's chain, or ""
// when there is none.
func SQLState(err error) string {
	if pgErr, ok := pgError(err); ok {
		return pgErr.Code
	}
	return ""
}

// ConstraintName returns the name of the constraint a PostgreSQL error in
// err's chain reports, or "". Callers match it against the constraint names
// in migrations/ to produce precise errors (which field clashed, which
// parent is missing).
func ConstraintName(err error) string {
	if pgErr, ok := pgError(err); ok {
		return pgErr.ConstraintName
	}
	return ""
}

// IsUnavailable reports whether err means the database could not be used
// at all: no connection (refused, reset, closed, timed out), PostgreSQL
// class 08 (connection exception), shutting down or starting up (57P01,
// 57P02, 57P03) or out of connection slots (53300). Classified by type and
// SQLSTATE, never by message text; context cancellation is not one.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch code := SQLState(err); {
	case strings.HasPrefix(code, "08"),
		code == pgerrcode.AdminShutdown, code == pgerrcode.CrashShutdown, code == pgerrcode.CannotConnectNow,
		code == pgerrcode.TooManyConnections:
		return true
	case code != "":
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// IsRetryable reports whether err means the transaction lost a race
// (serialization failure or deadlock) and may succeed if run again.
func IsRetryable(err error) bool {
	switch SQLState(err) {
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected:
		return true
	}
	return false
}

// Classify maps a PostgreSQL error to an *errs.Error by SQLSTATE, keeping
// err as the wrapped cause. Messages are deliberately generic: they reach
// API callers, who know nothing of our constraint names; callers that know
// better (via ConstraintName) should build their own error instead.
//
// A database that cannot be reached is UNAVAILABLE with a retry hint
// (IsUnavailable); a foreign-key violation is NOT_FOUND: the parent of what
// was written vanished meanwhile (deletes that find children say so
// themselves, as HAS_DEPENDENTS).
//
// nil, errors already classified, context cancellation (including 57014
// query_canceled) and SQLSTATEs without an obvious client-facing meaning are
// returned unchanged.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	if IsUnavailable(err) {
		return errs.Wrap(err, errs.KindUnavailable, ReasonDatabaseUnavailable,
			"the database is unavailable; retry shortly").WithRetryAfter(UnavailableRetryAfter)
	}
	pgErr, ok := pgError(err)
	if !ok {
		return err
	}
	code := pgErr.Code
	var e *errs.Error
	switch {
	case code == pgerrcode.UniqueViolation:
		e = errs.Wrap(err, errs.KindAlreadyExists, errs.ReasonAlreadyExists, "resource already exists")
	case code == pgerrcode.ForeignKeyViolation:
		// PostgreSQL reports both "row still referenced" (delete of a
		// parent) and "referenced row missing" (insert of a child) as 23503.
		// Deletes check for children under lock and name them themselves
		// (HAS_DEPENDENTS); what reaches here is a write whose parent was
		// checked and then deleted by a concurrent call before the commit.
		e = errs.Wrap(err, errs.KindNotFound, ReasonParentGone,
			"a resource this one belongs to was deleted meanwhile")
	case code == pgerrcode.CheckViolation:
		e = errs.Wrap(err, errs.KindInvalidArgument, errs.ReasonInvalidField, "value violates a constraint")
	case code == pgerrcode.NotNullViolation:
		e = errs.Wrap(err, errs.KindInvalidArgument, errs.ReasonInvalidField, "required value is missing")
	case strings.HasPrefix(code, "22"): // data exception class
		e = errs.Wrap(err, errs.KindInvalidArgument, errs.ReasonInvalidField, "invalid value")
	case code == pgerrcode.SerializationFailure || code == pgerrcode.DeadlockDetected:
		e = errs.Wrap(err, errs.KindAborted, ReasonConcurrencyConflict,
			"the operation conflicted with a concurrent change; retry it")
	default:
		return err
	}
	if pgErr.ConstraintName != "" {
		e.With(MetaConstraint, pgErr.ConstraintName)
	}
	if pgErr.ColumnName != "" && (code == pgerrcode.NotNullViolation || strings.HasPrefix(code, "22")) {
		e.With(MetaColumn, pgErr.ColumnName)
	}
	return e
}

func pgError(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr, true
	}
	return nil, false
}
