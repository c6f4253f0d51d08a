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
	// prefetch and item: see InGroupTxPrefetched (nil for InGroupTx).
	prefetch *Prefetch
	item     any
}

// Prefetch reads ahead for the members of a batch that share it.
//
// A member's first round trip is its reads (locks included), and every
// member of a batch waits for the one before it while the department is
// locked, so per change the department stays locked for a whole round
// trip, whatever little the change writes (its writes are deferred and
// travel with the next member's reads). When the members of a batch share
// a Prefetch, their reads go out together in one round trip before any of
// them runs, in the order the members would have sent them, so locks are
// still taken in the same order; the members then run one after the other
// without a round trip of their own, and their writes travel together.
//
// A member may use what was read for it only while Tx.Prefetched says so:
// the rows were read before the members ahead of it in the batch ran, so a
// member must add what those members changed in rows it shares with them
// (Read can hand the items a shared scratch for that), and it must read for
// itself whenever Prefetched is false.
type Prefetch struct {
	// Read queues on b, for each item in the order its member runs, the
	// reads that member would send first. Each read's own failure (a row
	// not found) must stay the item's (Batch.Guarded), so that one member's
	// missing row does not fail the others; its member then reads for
	// itself. Read runs again on every attempt of the transaction.
	Read func(b *Batch, items []any)
	// Done, when set, runs after each member that shares the Prefetch and
	// succeeded while the prefetch holds (whether it used what was read
	// for it or read for itself), before the next member runs: that is
	// where what it changed is added to what Read handed the members after
	// it. A member that failed changed nothing; one whose deferred write
	// fails later is rolled back, and the prefetch no longer holds for the
	// members after it.
	Done func(item any)
}

type groups struct {
	mu    sync.Mutex
	byKey map[string]*groupState
	// What GroupStats reports.
	batches, members, roundTrips atomic.Uint64
	setFlushes, setFallbacks     atomic.Uint64
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
	// SetFlushes is how many batches wrote their members' set writes in
	// one statement each (SetWrite); SetFallbacks how many tried and, as
	// those statements failed, sent each member's writes on their own.
	SetFlushes, SetFallbacks uint64
}

// Since is what the counters moved from before to s.
func (s GroupStats) Since(before GroupStats) GroupStats {
	return GroupStats{Batches: s.Batches - before.Batches, Members: s.Members - before.Members,
		RoundTrips: s.RoundTrips - before.RoundTrips, SetFlushes: s.SetFlushes - before.SetFlushes,
		SetFallbacks: s.SetFallbacks - before.SetFallbacks}
}

// GroupStats reports the counters of InGroupTx (exported as metrics).
func (db *DB) GroupStats() GroupStats {
	g := &db.groups
	return GroupStats{Batches: g.batches.Load(), Members: g.members.Load(), RoundTrips: g.roundTrips.Load(),
		SetFlushes: g.setFlushes.Load(), SetFallbacks: g.setFallbacks.Load()}
}

// GroupPending is how many changes of key wait for the next batch (tests
// use it to line a batch up behind one that runs).
func (db *DB) GroupPending(key string) int {
	db.groups.mu.Lock()
	defer db.groups.mu.Unlock()
	if st := db.groups.byKey[key]; st != nil {
		return len(st.pending)
	}
	return 0
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
// applied one batch after the other; the rest need not wait. A batch that
// read ahead holds the department lock for sure and hands on only once it
// committed (runGroup).
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
	return db.inGroup(ctx, key, &groupMember{ctx: ctx, fn: fn, done: make(chan error, 1)})
}

// InGroupTxPrefetched is InGroupTx for a member whose first reads p makes
// for it, together with those of the batch's other members that share p
// (see Prefetch); item is what p.Read is handed for this member (and where
// it keeps the rows), fn what runs as InGroupTx's. A member alone in its
// batch is not prefetched: it reads as it would under InGroupTx.
func (db *DB) InGroupTxPrefetched(ctx context.Context, key string, p *Prefetch, item any, fn func(ctx context.Context, tx *Tx) error) error {
	return db.inGroup(ctx, key, &groupMember{ctx: ctx, fn: fn, done: make(chan error, 1), prefetch: p, item: item})
}

func (db *DB) inGroup(ctx context.Context, key string, m *groupMember) error {
	if key == "" {
		return db.InTx(ctx, TxOptions{}, m.fn)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
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
// executed runs (once) when the members ran, before their last writes and
// COMMIT go out, or after COMMIT for a batch that read ahead.
func (db *DB) runGroup(batch []*groupMember, executed func()) {
	prefetch, prefetched := prefetchFirst(batch)
	// readAhead: the first members' reads go out together (Prefetch),
	// the department's lock first.
	readAhead := prefetched > 1
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
		// The first members share a Prefetch: their reads, in one round
		// trip.
		valid := false
		if readAhead {
			items := make([]any, prefetched)
			for i, m := range batch[:prefetched] {
				items[i] = m.item
			}
			var b Batch
			prefetch.Read(&b, items)
			tx.queuePrefetchSavepoint()
			switch err := tx.Send(ctx, &b); {
			case err == nil:
				valid = true
			case rollbackFailed(err):
				return err
			default:
				// Whatever failed (a lock that timed out, say) is
				// then met by the member it belongs to, on its own.
				if rerr := tx.rollbackPrefetch(ctx); rerr != nil {
					return rerr
				}
			}
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
				err = runMember(ctx, tx, i, batch[i], valid && i < prefetched)
				if err == nil && valid && i < prefetched && prefetch.Done != nil {
					prefetch.Done(batch[i].item)
				}
			} else {
				// The last members' deferred writes go out with COMMIT
				// (commitMerged). A failure among them is still one
				// member's: PostgreSQL skipped the COMMIT behind it, and
				// the batch goes on from that member's savepoint.
				//
				// The next batch may start now, unless this one read
				// ahead: a Prefetch locks the department first, so this
				// batch holds that lock until COMMIT, and a next batch
				// started now would take the changes waiting so far and
				// then queue behind the lock in the database. Started
				// after COMMIT it takes everything that arrived until
				// then: fewer, larger batches, which measured 10-30%
				// more changes per second (and less CPU per change)
				// for the department's locking writes at 16 clients.
				if !readAhead {
					once.Do(executed)
				}
				if err = tx.commitMerged(ctx, &db.groups); err == nil {
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
				// The members that run again would see rows the
				// prefetch read before those that rolled back ran.
				valid = false
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

// prefetchFirst moves the members that share the first member's Prefetch
// (in the order they came) to the front of batch and returns that Prefetch
// and how many share it. The batch's members came concurrently, so any
// order of them is one they could have had.
func prefetchFirst(batch []*groupMember) (*Prefetch, int) {
	var p *Prefetch
	for _, m := range batch {
		if m.prefetch != nil {
			p = m.prefetch
			break
		}
	}
	if p == nil {
		return nil, 0
	}
	front := make([]*groupMember, 0, len(batch))
	var rest []*groupMember
	for _, m := range batch {
		if m.prefetch == p {
			front = append(front, m)
		} else {
			rest = append(rest, m)
		}
	}
	copy(batch, append(front, rest...))
	return p, len(front)
}

// runMember runs member i of a batch after its savepoint, and rolls back to
// it when the member fails. The failure of an earlier member's deferred
// write (a *deferredError naming it) is returned as it is, for runGroup to
// recover from. prefetched: the batch's Prefetch read for this member and
// still holds (Tx.Prefetched, on the member's first attempt only).
func runMember(ctx context.Context, tx *Tx, i int, m *groupMember, prefetched bool) error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	mctx := memberContext{Context: ctx, values: m.ctx}
	defer func() { tx.prefetched = false }()
	for attempt := 1; ; attempt++ {
		tx.startMember(i)
		// A member run again after a deadlock may have been waiting
		// behind a change to its own rows: it reads them itself.
		tx.prefetched = prefetched && attempt == 1
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
