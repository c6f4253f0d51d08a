package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultMaxAttempts bounds how often InTx runs the callback when
// PostgreSQL keeps aborting it with a serialization failure or deadlock.
const DefaultMaxAttempts = 8

// TxOptions selects the transaction mode for InTx.
type TxOptions struct {
	// Isolation defaults to pgx.ReadCommitted, set explicitly so that a
	// server-side default_transaction_isolation cannot change behaviour.
	Isolation pgx.TxIsoLevel
	// ReadOnly makes the transaction READ ONLY.
	ReadOnly bool
	// MaxAttempts overrides DefaultMaxAttempts when positive.
	MaxAttempts int
	// roundTrips, when set, counts the transaction's round trips
	// (GroupStats).
	roundTrips *atomic.Uint64
}

// Backoff bounds between attempts. Conflicts clear as soon as the other
// transaction finishes, which is usually within milliseconds.
const (
	retryBaseDelay = 5 * time.Millisecond
	retryMaxDelay  = 500 * time.Millisecond
)

// InTx runs fn in a transaction on db and commits it if fn returns nil.
// When the transaction fails with a serialization failure (40001) or a
// deadlock (40P01), whether from fn or from COMMIT, the whole callback runs
// again in a fresh transaction, so fn must not have side effects outside tx
// (or they must be idempotent). Any other error from fn is returned as-is
// after rollback. A retryable error that persists after the last attempt is
// returned as-is as well; pass it through Classify to get an errs.Error.
func (db *DB) InTx(ctx context.Context, opts TxOptions, fn func(ctx context.Context, tx *Tx) error) error {
	txo := pgx.TxOptions{IsoLevel: opts.Isolation, AccessMode: pgx.ReadWrite}
	if txo.IsoLevel == "" {
		txo.IsoLevel = pgx.ReadCommitted
	}
	if opts.ReadOnly {
		txo.AccessMode = pgx.ReadOnly
	}
	maxAttempts := opts.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}

	for attempt := 1; ; attempt++ {
		err := runTx(ctx, db, txo, opts.roundTrips, fn)
		if err == nil || !IsRetryable(err) || attempt >= maxAttempts {
			return err
		}
		t := time.NewTimer(retryDelay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			// Only the cause is wrapped: callers must see a cancellation,
			// not a retryable conflict.
			return fmt.Errorf("store: transaction gave up after %d attempts: %w (last attempt: %v)",
				attempt, context.Cause(ctx), err) //nolint:errorlint // see above
		case <-t.C:
		}
	}
}

func runTx(ctx context.Context, db *DB, txo pgx.TxOptions, roundTrips *atomic.Uint64, fn func(context.Context, *Tx) error) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	t := &Tx{conn: conn, begin: beginStatement(txo), roundTrips: roundTrips}
	defer func() {
		// Also runs when fn panics. After a successful commit there is
		// nothing to roll back. A cancelled ctx must not stop us from
		// ending the transaction, or the connection would go back to the
		// pool mid-transaction; if ROLLBACK fails, Release closes the
		// connection instead (it never pools one that is not idle).
		if t.started {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			_ = t.rollback(rctx)
			cancel()
		}
		conn.Release()
	}()
	if err := fn(ctx, t); err != nil {
		return err
	}
	if err := t.commit(ctx); err != nil {
		return err
	}
	if t.signal && db.commits != nil {
		db.commits.Notify()
	}
	return nil
}

// retryDelay is exponential with "equal jitter": half fixed, half random, so
// that two transactions that conflicted once do not retry in lockstep.
func retryDelay(attempt int) time.Duration {
	d := retryBaseDelay << (attempt - 1)
	if d > retryMaxDelay || d <= 0 {
		d = retryMaxDelay
	}
	return d/2 + rand.N(d/2+1)
}
