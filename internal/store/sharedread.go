package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Shared reads: the read every team-scoped call starts with (the team and
// the caller's grants) costs one round trip, and at many calls a second
// most of that round trip is per-statement overhead on both ends (a write
// and a wake-up per query, a Bind/Execute/Sync per statement), not the
// work of the query. SendShared lets concurrent callers share a round
// trip: whoever finds a free sender runs everything queued so far as one
// pipeline, the way group commit shares a WAL flush.
//
// Freshness is that of Send: a caller's reads are sent after the caller
// arrived, so they see every write acknowledged before it. Nothing is
// cached between calls.

const (
	// sharedSenders bounds the pipelines in flight at once (each holds a
	// pool connection). Two keep one on the wire while the next fills.
	sharedSenders = 2
	// sharedMaxCalls bounds one pipeline, so a burst is not one huge
	// pipeline whose last caller waits for all the others.
	sharedMaxCalls = 64
	// sharedTimeout bounds a pipeline that runs without any one caller's
	// deadline (callers that give up stop waiting for it).
	sharedTimeout = 30 * time.Second
)

type sharedCall struct {
	b    *Batch
	err  error
	done chan struct{}
}

type sharedReads struct {
	mu      sync.Mutex
	pending []*sharedCall
	senders int

	pipelines atomic.Int64 // of more than one call; for tests
}

// SendShared is Send, with b possibly sent in one pipeline together with
// the batches of concurrent callers. Each caller gets its own reads' first
// error; a statement that fails on the server does not fail the others'
// (their reads are sent again on their own).
func (db *DB) SendShared(ctx context.Context, b *Batch) error {
	if len(b.items) == 0 {
		return nil
	}
	c := &sharedCall{b: b, done: make(chan struct{})}
	s := &db.shared
	s.mu.Lock()
	s.pending = append(s.pending, c)
	lead := s.senders < sharedSenders
	if lead {
		s.senders++
	}
	s.mu.Unlock()
	if lead {
		// The caller's own call is in this first pipeline; the rest of
		// the queue, if any, goes on in the background.
		if db.sendPending(ctx) {
			go db.drainShared(context.WithoutCancel(ctx))
		}
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// QueryRowShared is QueryRow outside a transaction as a shared read
// (SendShared): the row is read when Scan is called, and no row is
// pgx.ErrNoRows. For the single-value checks that run on every call or
// every wake-up.
func (db *DB) QueryRowShared(ctx context.Context, sql string, args ...any) pgx.Row {
	return sharedRow{ctx: ctx, db: db, sql: sql, args: args}
}

type sharedRow struct {
	ctx  context.Context
	db   *DB
	sql  string
	args []any
}

func (r sharedRow) Scan(dest ...any) error {
	var b Batch
	b.QueueRows(func(rows pgx.Rows) error {
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return pgx.ErrNoRows
		}
		return rows.Scan(dest...)
	}, r.sql, r.args...)
	return r.db.SendShared(r.ctx, &b)
}

// drainShared sends what is queued until the queue is empty.
func (db *DB) drainShared(ctx context.Context) {
	for db.sendPending(ctx) {
	}
}

// sendPending sends up to sharedMaxCalls queued calls as one pipeline and
// reports whether more are queued; when none are, it gives up its sender
// slot.
func (db *DB) sendPending(ctx context.Context) (more bool) {
	s := &db.shared
	s.mu.Lock()
	n := min(len(s.pending), sharedMaxCalls)
	calls := s.pending[:n:n]
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		s.pending = nil
	}
	s.mu.Unlock()

	if len(calls) > 0 {
		db.sendCalls(ctx, calls)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) > 0 {
		return true
	}
	s.senders--
	return false
}

// sendCalls runs calls as one pipeline and finishes each of them.
func (db *DB) sendCalls(ctx context.Context, calls []*sharedCall) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedTimeout)
	defer cancel()
	if len(calls) == 1 {
		c := calls[0]
		c.err = db.Send(ctx, c.b)
		close(c.done)
		return
	}
	s := &db.shared
	s.pipelines.Add(1)
	pb := &pgx.Batch{}
	for _, c := range calls {
		for _, it := range c.b.items {
			pb.Queue(it.sql, it.args...)
		}
	}
	br := db.pool.SendBatch(ctx, pb)
	// After a statement fails on the server, PostgreSQL skips the rest of
	// the pipeline: the calls after it were not answered and go again alone.
	var resend []*sharedCall
	broken := false
	for _, c := range calls {
		if broken {
			resend = append(resend, c)
			continue
		}
		broken, c.err = readShared(br, c.b)
		close(c.done)
	}
	// Every call that counts was answered or is sent again; an error
	// closing the pipeline is the connection's, which the pool discards.
	_ = br.Close()
	for _, c := range resend {
		c.err = db.Send(ctx, c.b)
		close(c.done)
	}
}

// readShared reads one call's results from a shared pipeline: whether the
// server (or the connection) failed, which leaves the rest of the pipeline
// unanswered, and the call's first error.
func readShared(br pgx.BatchResults, b *Batch) (broken bool, err error) {
	for _, it := range b.items {
		rows, qerr := br.Query()
		if qerr != nil {
			return true, qerr
		}
		rerr := it.rows(rows)
		rows.Close()
		if serr := rows.Err(); serr != nil {
			return true, serr
		}
		if rerr != nil && err == nil {
			err = rerr
		}
	}
	return false, err
}
