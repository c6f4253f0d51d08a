package store

import (
	"context"
	"sync"
	"time"
)

// Group commit.
//
// Every change below a department locks that department's row and keeps
// the lock until COMMIT, whose WAL flush is the longest step of a durable
// write (about 1.5 ms on this project's CI machine, more on network disks).
// Run one by one, a department accepts one change per flush, however many
// cores the database has. InGroupTx runs the changes queued for one key
// (the department) together instead: one transaction, one lock, one flush,
// and a savepoint per change, so that each change still succeeds or fails
// on its own exactly as it would in a transaction of its own.
//
// There is no timer: a change that arrives when nothing of its key is
// running starts a transaction at once, and what arrives meanwhile forms
// the next batch. At low load a batch is one change; under load batches grow
// and the cost of the lock and the flush is shared.

// maxGroup bounds a batch. Each member is a subtransaction; past 64
// subtransaction ids in one transaction PostgreSQL's snapshots of every
// session take a slower path (the subxid cache overflows).
const maxGroup = 32

// groupTimeout bounds one batch's transaction. A member's own cancellation
// must not cancel a statement on the shared connection (pgx would close
// it and fail the whole batch), so members run without their cancel and the
// batch has this deadline instead.
const groupTimeout = 30 * time.Second

// memberRetries is how often a member that hit a deadlock is run again
// inside its batch (after rolling back to its savepoint).
const memberRetries = 3

type groupMember struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *Tx) error
	done chan error
}

type groupQueue struct {
	pending []*groupMember
}

type groups struct {
	mu sync.Mutex
	// byKey holds a queue while a batch of its key runs; a queue present
	// in the map means a leader is running or about to run its next batch.
	byKey map[string]*groupQueue
}

// InGroupTx runs fn like InTx (read committed, retried on deadlocks), but
// together with the other changes of the same key that arrive while one
// is running: see Group commit above. fn must meet InTx's contract (no side
// effects outside tx, or idempotent ones) and must not depend on being the
// only change in its transaction, e.g. on transaction_timestamp(). Its
// context carries the caller's values but not its cancellation (see
// groupTimeout); a caller whose context ends before its turn gets the
// context's error and nothing is written. An empty key is InTx.
func (db *DB) InGroupTx(ctx context.Context, key string, fn func(ctx context.Context, tx *Tx) error) error {
	if key == "" {
		return db.InTx(ctx, TxOptions{}, fn)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &groupMember{ctx: ctx, fn: fn, done: make(chan error, 1)}
	db.groups.mu.Lock()
	if db.groups.byKey == nil {
		db.groups.byKey = map[string]*groupQueue{}
	}
	q, running := db.groups.byKey[key]
	if !running {
		q = &groupQueue{}
		db.groups.byKey[key] = q
	}
	q.pending = append(q.pending, m)
	db.groups.mu.Unlock()
	if !running {
		// This caller leads: it runs the first batch itself (no goroutine
		// hop at low load) and hands on to a goroutine if more queued up.
		db.leadGroup(key, q)
	}
	return <-m.done
}

// leadGroup runs batches of key until its queue is empty.
func (db *DB) leadGroup(key string, q *groupQueue) {
	db.groups.mu.Lock()
	n := min(len(q.pending), maxGroup)
	batch := q.pending[:n:n]
	q.pending = append([]*groupMember(nil), q.pending[n:]...)
	db.groups.mu.Unlock()

	db.runGroup(batch)

	db.groups.mu.Lock()
	if len(q.pending) == 0 {
		delete(db.groups.byKey, key)
		db.groups.mu.Unlock()
		return
	}
	db.groups.mu.Unlock()
	// The leader's own change is answered; it must not wait for others'.
	go db.leadGroup(key, q)
}

// runGroup runs one batch in one transaction and answers every member.
func (db *DB) runGroup(batch []*groupMember) {
	results := make([]error, len(batch))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), groupTimeout)
	defer cancel()
	err := db.InTx(ctx, TxOptions{}, func(ctx context.Context, tx *Tx) error {
		clear(results)
		if len(batch) == 1 {
			// Alone: no savepoint needed, and any error is the
			// transaction's (InTx retries deadlocks as usual).
			m := batch[0]
			if err := m.ctx.Err(); err != nil {
				results[0] = err
				return nil
			}
			return m.fn(memberContext{Context: ctx, values: m.ctx}, tx)
		}
		for i, m := range batch {
			results[i] = runMember(ctx, tx, m)
			if rollbackFailed(results[i]) {
				return results[i]
			}
		}
		return nil
	})
	for i, m := range batch {
		if err != nil {
			m.done <- err
		} else {
			m.done <- results[i]
		}
	}
}

// runMember runs one member of a batch between a savepoint and its release
// or rollback.
func runMember(ctx context.Context, tx *Tx, m *groupMember) error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	mctx := memberContext{Context: ctx, values: m.ctx}
	for attempt := 1; ; attempt++ {
		// Savepoints of one name stack; ROLLBACK TO names the newest, so no
		// RELEASE is needed after a member that succeeded.
		if _, err := tx.Exec(ctx, `SAVEPOINT group_member`); err != nil {
			return rollbackError{err}
		}
		err := m.fn(mctx, tx)
		if err == nil {
			return nil
		}
		if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT group_member`); rerr != nil {
			return rollbackError{rerr}
		}
		if !IsRetryable(err) || attempt >= memberRetries {
			return err
		}
	}
}

// rollbackError is a failure of the batch's own statements (the
// connection broke): the batch ends and every member gets it.
type rollbackError struct{ err error }

func (e rollbackError) Error() string { return e.err.Error() }
func (e rollbackError) Unwrap() error { return e.err }

func rollbackFailed(err error) bool {
	_, ok := err.(rollbackError) //nolint:errorlint // only runMember makes it, unwrapped
	return ok
}

// memberContext is the batch's context (deadline and cancellation of the
// shared transaction) with one member's values (principal, request id,
// trace span), so that what a member records is its own.
type memberContext struct {
	context.Context
	values context.Context
}

func (c memberContext) Value(key any) any { return c.values.Value(key) }
