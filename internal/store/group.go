package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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

type groups struct {
	mu    sync.Mutex
	byKey map[string]*groupState
	// What GroupStats reports.
	batches, members, roundTrips atomic.Uint64
}

// GroupStats counts what InGroupTx did since the DB was made (changes
// with an empty key, which run as InTx, are not counted).
type GroupStats struct {
	// Batches is how many group transactions ran; Members how many
	// changes they carried. Their ratio is the batch size: how many
	// changes share one lock and one WAL flush.
	Batches, Members uint64
	// RoundTrips is how many times those transactions waited for the
	// database, BEGIN to COMMIT, retries included. The members of a batch
	// run one after the other while their department is locked, so
	// RoundTrips per member is the serial part of a change's cost.
	RoundTrips uint64
}

// GroupStats reports the counters of InGroupTx (exported as metrics).
func (db *DB) GroupStats() GroupStats {
	g := &db.groups
	return GroupStats{Batches: g.batches.Load(), Members: g.members.Load(), RoundTrips: g.roundTrips.Load()}
}

// groupState is one key's queue. A key is in groups.byKey while a batch of
// it runs or members wait.
type groupState struct {
	pending []*groupMember
	// running counts batches in flight: at most maxInFlight, one of them
	// still running its members, the other already committing.
	running int
}

// maxInFlight lets the next batch of a key run its members while the
// previous one waits for its COMMIT's flush, which is otherwise time when
// neither the database nor this process has anything of the key to do.
// A member of the next batch that needs the department lock waits in the
// database until that commit is done, so changes that lock are still
// applied one batch after the other; the rest need not wait.
const maxInFlight = 2

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
		db.groups.byKey = map[string]*groupState{}
	}
	st := db.groups.byKey[key]
	if st == nil {
		st = &groupState{}
		db.groups.byKey[key] = st
	}
	st.pending = append(st.pending, m)
	var batch []*groupMember
	if st.running == 0 {
		batch = db.takeBatch(st)
	}
	db.groups.mu.Unlock()
	if batch != nil {
		// This caller leads: it runs the first batch itself (no goroutine
		// hop at low load); later batches run on goroutines of their own.
		db.runBatch(key, st, batch)
	}
	return <-m.done
}

// takeBatch takes the next batch of st and counts it as running; the
// caller holds groups.mu.
func (db *DB) takeBatch(st *groupState) []*groupMember {
	n := min(len(st.pending), maxGroup)
	batch := st.pending[:n:n]
	// The rest is copied so that the next batch does not keep this one's
	// members reachable.
	st.pending = append([]*groupMember{}, st.pending[n:]...)
	st.running++
	return batch
}

// startNext starts the next batch of key on a goroutine when members wait
// and fewer than maxInFlight batches run.
func (db *DB) startNext(key string, st *groupState) {
	db.groups.mu.Lock()
	var batch []*groupMember
	if len(st.pending) > 0 && st.running < maxInFlight {
		batch = db.takeBatch(st)
	}
	db.groups.mu.Unlock()
	if batch != nil {
		go db.runBatch(key, st, batch)
	}
}

// runBatch runs one batch of key and then hands on: the next batch may
// start as soon as this one's members ran (before its COMMIT), and at the
// latest when it is done.
func (db *DB) runBatch(key string, st *groupState, batch []*groupMember) {
	db.runGroup(batch, func() { db.startNext(key, st) })
	db.groups.mu.Lock()
	st.running--
	if st.running == 0 && len(st.pending) == 0 {
		delete(db.groups.byKey, key)
	}
	db.groups.mu.Unlock()
	// The caller's own change is answered; it must not wait for others'.
	db.startNext(key, st)
}

// runGroup runs one batch in one transaction and answers every member;
// executed runs (once) when the members ran, before COMMIT.
func (db *DB) runGroup(batch []*groupMember, executed func()) {
	results := make([]error, len(batch))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), groupTimeout)
	defer cancel()
	db.groups.batches.Add(1)
	db.groups.members.Add(uint64(len(batch)))
	var once sync.Once
	err := db.InTx(ctx, TxOptions{roundTrips: &db.groups.roundTrips}, func(ctx context.Context, tx *Tx) error {
		defer once.Do(executed)
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
		// A member's deferred writes travel with the next member's first
		// round trip (Tx), so a failure may surface while a later member
		// runs. It then belongs to the member that queued it: nothing
		// after it ran, the transaction is rolled back to that member's
		// savepoint (the newest one that exists), and the members after it
		// run again.
		for i := 0; ; {
			var err error
			if i < len(batch) {
				err = runMember(ctx, tx, i, batch[i])
			} else {
				// The last members' deferred writes, before COMMIT, so
				// that a failure among them is still one member's.
				if err = tx.flush(ctx); err == nil {
					return nil
				}
			}
			if rollbackFailed(err) {
				return err
			}
			if d := (*deferredError)(nil); errors.As(err, &d) && d.member != i {
				if rerr := tx.rollbackToNewestSavepoint(ctx); rerr != nil {
					return rerr
				}
				results[d.member] = d.err
				i = d.member + 1
				continue
			}
			if i == len(batch) {
				return err // a flush failure that names no member
			}
			results[i] = err
			i++
		}
	})
	for i, m := range batch {
		if err != nil {
			m.done <- err
		} else {
			m.done <- results[i]
		}
	}
}

// runMember runs member i of a batch after its savepoint, and rolls back to
// it when the member fails. The failure of an earlier member's deferred
// write (a *deferredError naming it) is returned as it is, for runGroup to
// recover from.
func runMember(ctx context.Context, tx *Tx, i int, m *groupMember) error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	mctx := memberContext{Context: ctx, values: m.ctx}
	for attempt := 1; ; attempt++ {
		tx.startMember(i)
		err := m.fn(mctx, tx)
		if f := tx.failed; f != nil {
			if f.member != i {
				return f // an earlier member's deferred write: runGroup recovers
			}
			err = f.err // this member's own, whatever fn made of it
		}
		if err == nil {
			return nil
		}
		if rollbackFailed(err) {
			return err
		}
		if rerr := tx.rollbackMember(ctx); rerr != nil {
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
	var r rollbackError
	return errors.As(err, &r)
}

// memberContext is the batch's context (deadline and cancellation of the
// shared transaction) with one member's values (principal, request id,
// trace span), so that what a member records is its own.
type memberContext struct {
	context.Context
	values context.Context
}

func (c memberContext) Value(key any) any { return c.values.Value(key) }
