package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Round trips.
//
// A write of the API is a few short statements, and what each costs the
// server and the database is mostly the round trip around it (a network
// write and read on both sides, and the wake-ups), not the statement. A
// Tx therefore sends what does not need an answer of its own together
// with the next statement that does, in one pipeline (pgx.Batch): BEGIN
// goes out with the first statement, a group member's SAVEPOINT with the
// member's first statement, and writes whose result nobody reads
// (ExecDeferred: audit rows, work queue entries, stored answers) with
// whatever the transaction sends next, COMMIT at the latest. PostgreSQL
// runs a pipeline in order and stops at its first error, so this changes
// when an error is seen, never what is written.

// stmt is a statement waiting for the transaction's next round trip.
type stmt struct {
	sql  string
	args []any
	// member is the group member that queued it (0 outside groups);
	// memberBegin and memberPrefetch mark the batch's own statements.
	member int
	// savepoint marks a member's SAVEPOINT (Tx.savepointSent tells that
	// the running member's went out).
	savepoint bool
	// mapErr turns the statement's error into the caller's (nil: as is).
	mapErr func(error) error
	// set: the write can be made for many members at once (SetWrite).
	set *SetWrite
}

// The member of statements that belong to no member.
const (
	memberBegin    = -1 // BEGIN
	memberPrefetch = -2 // the savepoint before a batch's prefetch
	memberMerged   = -3 // a batch's set writes and their savepoint
)

// deferredError is the error of a statement that ran after the call that
// queued it: it names the group member it belongs to.
type deferredError struct {
	member int
	err    error
}

func (e *deferredError) Error() string { return e.err.Error() }
func (e *deferredError) Unwrap() error { return e.err }

// Tx is one transaction, handed to the callback of DB.InTx. It is typed so
// that what runs inside a transaction says so in its signature, and so that
// nobody outside the store commits or rolls it back.
type Tx struct {
	conn *pgxpool.Conn
	// begin is BEGIN with its options until it is sent.
	begin string
	// started: BEGIN went out (so COMMIT or ROLLBACK must follow).
	started bool
	queued  []stmt
	// member is the group member running now (queued statements carry it).
	member int
	// savepointSent: the current member's SAVEPOINT reached the server.
	savepointSent bool
	// failed is the first queued statement that failed since the last
	// recovery: whatever a member's callback made of the error it got
	// (mapped it by SQLSTATE, say), the group takes the failure from here.
	failed *deferredError
	signal bool
	// prefetched: see Prefetched.
	prefetched bool
	// roundTrips counts what the connection is sent, when set (GroupStats).
	roundTrips *atomic.Uint64
}

// roundTrip counts one exchange with the server: a pipeline sent and its
// results read, or one statement on its own.
func (t *Tx) roundTrip() {
	if t.roundTrips != nil {
		t.roundTrips.Add(1)
	}
}

func beginStatement(o pgx.TxOptions) string {
	s := "BEGIN ISOLATION LEVEL " + string(o.IsoLevel)
	if o.AccessMode != "" {
		s += " " + string(o.AccessMode)
	}
	return s
}

// Prefetched reports whether the running group member may use what its
// Prefetch read for it (InGroupTxPrefetched): the read ran in this attempt
// of the transaction and nothing since undid what the members ahead of it
// did. Otherwise the member reads for itself.
func (t *Tx) Prefetched() bool { return t.prefetched }

// SignalCommit asks InTx to notify the DB's CommitSignal once this
// transaction has committed (nothing happens if it rolls back).
func (t *Tx) SignalCommit() { t.signal = true }

// ExecDeferred queues a write whose result the caller does not need: it
// is sent with the transaction's next statement, or with COMMIT, in the
// same round trip. Its error (a constraint it breaks, say) is returned by
// that later call instead, so use it only where the caller would not act
// on the error but fail.
func (t *Tx) ExecDeferred(sql string, args ...any) {
	t.queued = append(t.queued, stmt{sql: sql, args: args, member: t.member})
}

// ExecDeferredMapped is ExecDeferred for a write whose failures mean
// something to the caller (a unique key already taken, a parent gone):
// mapErr turns the statement's error into the one the later call returns.
func (t *Tx) ExecDeferredMapped(mapErr func(error) error, sql string, args ...any) {
	t.queued = append(t.queued, stmt{sql: sql, args: args, member: t.member, mapErr: mapErr})
}

// Exec implements Querier.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if br == nil {
		t.roundTrip()
		return t.conn.Exec(ctx, sql, args...)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query implements Querier.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	if br == nil {
		t.roundTrip()
		return t.conn.Query(ctx, sql, args...)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow implements Querier.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	if br == nil {
		t.roundTrip()
		return t.conn.QueryRow(ctx, sql, args...)
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// send ships what is queued (BEGIN first, if not sent yet) followed by
// sql, and returns the results positioned at sql's. With nothing queued it
// returns nil: the caller runs sql on its own. A statement with pgx
// options among its arguments (a QueryExecMode) cannot go into a batch: the
// queue is sent first, then nil is returned.
func (t *Tx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if t.begin == "" && len(t.queued) == 0 {
		return nil, nil
	}
	if hasQueryOptions(args) {
		return nil, t.flush(ctx)
	}
	b, sent := t.batch()
	b.Queue(sql, args...)
	t.roundTrip()
	br := t.conn.SendBatch(ctx, b)
	if err := t.readQueued(br, sent); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// flush sends what is queued, alone.
func (t *Tx) flush(ctx context.Context) error {
	if t.begin == "" && len(t.queued) == 0 {
		return nil
	}
	b, sent := t.batch()
	t.roundTrip()
	br := t.conn.SendBatch(ctx, b)
	err := t.readQueued(br, sent)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// batch starts a pipeline with BEGIN (when not sent) and the queue, which
// it empties, and returns what it put in: their results come first.
func (t *Tx) batch() (*pgx.Batch, []stmt) {
	b := &pgx.Batch{}
	var sent []stmt
	if t.begin != "" {
		b.Queue(t.begin)
		sent = append(sent, stmt{sql: t.begin, member: memberBegin})
		t.begin, t.started = "", true
	}
	for _, s := range t.queued {
		b.Queue(s.sql, s.args...)
		if s.savepoint && s.member == t.member {
			t.savepointSent = true
		}
	}
	sent = append(sent, t.queued...)
	t.queued = nil
	return b, sent
}

// readQueued reads the results of the statements batch put first; the
// first failure is returned as the error of the member that queued it.
func (t *Tx) readQueued(br pgx.BatchResults, sent []stmt) error {
	for _, s := range sent {
		if _, err := br.Exec(); err != nil {
			switch {
			case s.member == memberBegin:
				return rollbackError{fmt.Errorf("store: begin: %w", err)}
			case s.member == memberPrefetch:
				return rollbackError{fmt.Errorf("store: savepoint before the prefetch: %w", err)}
			case s.savepoint:
				// Which savepoint is newest is no longer known: the
				// batch cannot recover a member on its own.
				return rollbackError{fmt.Errorf("store: savepoint: %w", err)}
			}
			if s.mapErr != nil {
				err = s.mapErr(err)
			}
			t.failed = &deferredError{member: s.member, err: err}
			return t.failed
		}
	}
	return nil
}

func hasQueryOptions(args []any) bool {
	if len(args) == 0 {
		return false
	}
	_, ok := args[0].(pgx.QueryExecMode)
	return ok
}

// commit sends the queue with COMMIT. A transaction with nothing started
// and nothing queued has nothing to commit: it never sent anything, or a
// group's last round trip committed it already (commitQueued).
func (t *Tx) commit(ctx context.Context) error {
	if !t.started && len(t.queued) == 0 {
		t.begin = ""
		return nil
	}
	return t.commitQueued(ctx)
}

// commitQueued sends what is queued followed by COMMIT, in one round
// trip. PostgreSQL runs a pipeline in order and skips everything after a
// failing statement up to its end, COMMIT included: a queued statement's
// failure is returned as flush returns it (the member's, for a group),
// and the transaction is still open, for the caller to roll back to a
// savepoint and go on, or to end. A failing COMMIT has ended the
// transaction (PostgreSQL rolls it back).
func (t *Tx) commitQueued(ctx context.Context) error {
	b, sent := t.batch()
	b.Queue("COMMIT")
	t.roundTrip()
	br := t.conn.SendBatch(ctx, b)
	err := t.readQueued(br, sent)
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		if err == nil && tag.String() != "COMMIT" {
			// A transaction that had failed answers COMMIT with ROLLBACK.
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		t.started = false
	}
	return err
}

// rollback ends the transaction if it started; queued statements are
// dropped.
func (t *Tx) rollback(ctx context.Context) error {
	t.queued, t.begin = nil, ""
	if !t.started {
		return nil
	}
	t.roundTrip()
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	t.started = false
	return err
}

// startMember makes member the one whose statements are queued next, with
// its SAVEPOINT first.
func (t *Tx) startMember(member int) {
	t.member, t.savepointSent = member, false
	t.queued = append(t.queued, stmt{sql: `SAVEPOINT group_member`, member: member, savepoint: true})
}

// rollbackMember undoes what the current member did. What it queued and
// did not send is simply dropped; if its SAVEPOINT ran, the server rolls
// back to it (savepoints of one name stack, and ROLLBACK TO names the
// newest, which is this member's).
func (t *Tx) rollbackMember(ctx context.Context) error {
	kept := t.queued[:0]
	for _, s := range t.queued {
		if s.member != t.member {
			kept = append(kept, s)
		}
	}
	t.queued, t.failed = kept, nil
	if !t.savepointSent {
		return nil
	}
	t.savepointSent = false
	return t.rollbackToNewestSavepoint(ctx)
}

// prefetchSavepoint is the savepoint a batch's prefetch runs after, so that
// a prefetch that fails can be undone and the members read for themselves.
const prefetchSavepoint = "group_prefetch"

// queuePrefetchSavepoint queues SAVEPOINT group_prefetch for the next
// round trip.
func (t *Tx) queuePrefetchSavepoint() {
	t.queued = append(t.queued, stmt{sql: `SAVEPOINT ` + prefetchSavepoint, member: memberPrefetch})
}

// rollbackPrefetch undoes a prefetch that failed (its reads and locks).
func (t *Tx) rollbackPrefetch(ctx context.Context) error {
	t.queued, t.failed = nil, nil
	t.roundTrip()
	_, err := t.conn.Exec(ctx, `ROLLBACK TO SAVEPOINT `+prefetchSavepoint)
	return err
}

// rollbackToNewestSavepoint recovers from a failed round trip whose first
// failure was an earlier member's queued statement: nothing after it ran,
// so the newest savepoint that exists is that member's.
func (t *Tx) rollbackToNewestSavepoint(ctx context.Context) error {
	t.queued, t.failed, t.savepointSent = nil, nil, false
	t.roundTrip()
	_, err := t.conn.Exec(ctx, `ROLLBACK TO SAVEPOINT group_member`)
	return err
}

// batchRows closes the batch with the rows.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closed   bool
	closeErr error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.closeErr = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// batchRow closes the batch once scanned (callers always scan a row).
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// releaseTimeout bounds ROLLBACK when the caller's context is gone.
const releaseTimeout = 5 * time.Second

// Batch collects reads that do not depend on each other's answers, for
// Tx.Send to run in one round trip, in order (so a row lock taken by one
// holds for the ones after it).
type Batch struct {
	items []batchItem
}

type batchItem struct {
	sql  string
	args []any
	rows func(pgx.Rows) error
}

// QueueRows adds a query whose rows read consumes (it must not close them).
func (b *Batch) QueueRows(read func(pgx.Rows) error, sql string, args ...any) {
	b.items = append(b.items, batchItem{sql: sql, args: args, rows: read})
}

// Guarded queues what queue adds to b, with each read's own failure (a
// row not found, a scan error) handed to failed instead of failing the
// batch: the reads after it still run and are read. An error of the
// server (which ends the transaction) still fails the batch.
func (b *Batch) Guarded(failed func(error), queue func(*Batch)) {
	var sub Batch
	queue(&sub)
	for _, it := range sub.items {
		read := it.rows
		it.rows = func(rows pgx.Rows) error {
			if err := read(rows); err != nil {
				failed(err)
			}
			return nil
		}
		b.items = append(b.items, it)
	}
}

// QueueOne adds a single-row read, as GetOne does it: FOR UPDATE when
// lock, no row is notFound; the row goes to *dst.
func QueueOne[T any](b *Batch, dst *T, sql string, lock bool, scan func(pgx.Row) (T, error), notFound error, args ...any) {
	if lock {
		sql += ` FOR UPDATE`
	}
	b.QueueRows(func(rows pgx.Rows) error {
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return notFound
		}
		v, err := scan(rows)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}, sql, args...)
}

// QueueMany adds a query whose rows (each read by scan) are appended to
// *dst.
func QueueMany[T any](b *Batch, dst *[]T, scan func(pgx.Row) (T, error), sql string, args ...any) {
	QueueEach(b, scan, func(v T) { *dst = append(*dst, v) }, sql, args...)
}

// QueueEach adds a query whose rows, each read by scan, are handed to each
// in order.
func QueueEach[T any](b *Batch, scan func(pgx.Row) (T, error), each func(T), sql string, args ...any) {
	b.QueueRows(func(rows pgx.Rows) error {
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			each(v)
		}
		return rows.Err()
	}, sql, args...)
}

// Send runs b's reads in one round trip outside a transaction (they see
// one snapshot: a pipeline runs as one implicit transaction) and returns
// the first error.
func (db *DB) Send(ctx context.Context, b *Batch) error {
	pb := &pgx.Batch{}
	for _, it := range b.items {
		pb.Queue(it.sql, it.args...)
	}
	return readBatch(db.pool.SendBatch(ctx, pb), b, nil)
}

// Send runs b's reads in one round trip, after what the transaction has
// queued (BEGIN, savepoints, deferred writes), and returns the first
// error. Every read runs even when an earlier one found nothing.
func (t *Tx) Send(ctx context.Context, b *Batch) error {
	if len(b.items) == 0 {
		return t.flush(ctx)
	}
	pb, sent := t.batch()
	for _, it := range b.items {
		pb.Queue(it.sql, it.args...)
	}
	t.roundTrip()
	br := t.conn.SendBatch(ctx, pb)
	return readBatch(br, b, t.readQueued(br, sent))
}

// readBatch reads b's results from br (after err, if any, only closes it).
func readBatch(br pgx.BatchResults, b *Batch, err error) error {
	for _, it := range b.items {
		if err != nil {
			break
		}
		rows, qerr := br.Query()
		if qerr != nil {
			err = qerr
			break
		}
		rerr := it.rows(rows)
		rows.Close()
		if rerr == nil {
			rerr = rows.Err()
		}
		if rerr != nil && err == nil {
			err = rerr
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
