package store

import (
	"errors"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// ReasonConcurrencyConflict is the ErrorInfo reason for a transaction that
// PostgreSQL kept aborting (serialization failure or deadlock) until InTx
// ran out of attempts. The client may retry the whole request.
const ReasonConcurrencyConflict = "CONCURRENCY_CONFLICT"

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
		// PostgreSQL reports both "row still referenced" (delete/update of a
		// parent) and "referenced row missing" (insert of a child) as 23503.
		// The former is what a well-behaved API caller can run into, as we
		// check parents before inserting; callers with better knowledge
		// override via ConstraintName.
		e = errs.Wrap(err, errs.KindFailedPrecondition, errs.ReasonHasChildren,
			"resource is referenced by other resources")
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
