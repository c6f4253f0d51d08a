package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

var errNoRow = errors.New("no row")

// queueInt queues `SELECT <sql>` with arg, its one int column into *dst.
func queueInt(b *store.Batch, dst *int, sql string, arg int) {
	store.QueueOne(b, dst, "SELECT "+sql, false, func(r pgx.Row) (int, error) {
		var v int
		return v, r.Scan(&v)
	}, errNoRow, arg)
}

// holdSenders fills every SendShared sender with a read that waits on an
// advisory lock the test holds, so that the calls queued next share one
// pipeline once release lets the senders go.
func holdSenders(t *testing.T, ctx context.Context, db *store.DB) (release func()) {
	t.Helper()
	holder, err := db.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for n := 1; n <= 2; n++ {
		wg.Go(func() {
			var b store.Batch
			var v int
			queueInt(&b, &v, "$1::int FROM (SELECT pg_advisory_xact_lock_shared(4242)) l", 0)
			if err := db.SendShared(ctx, &b); err != nil {
				t.Errorf("blocker: %v", err)
			}
		})
		waitShared(t, func() bool { return store.SharedSenders(db) == n && store.SharedPending(db) == 0 },
			"blocker %d in flight", n)
	}
	return func() {
		if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock(4242)"); err != nil {
			t.Error(err)
		}
		holder.Release()
		wg.Wait()
	}
}

func waitShared(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	for range 5000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting for "+what, args...)
}

// TestSendSharedFailureStaysWithItsCaller: calls that share a pipeline get
// their own answers. A statement that fails on the server (which makes
// PostgreSQL skip the rest of the pipeline) fails its own caller only, with
// PostgreSQL's error; the calls after it are answered anyway; a read that
// finds no row is that caller's NOT_FOUND and nobody else's.
func TestSendSharedFailureStaysWithItsCaller(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := store.New(storetest.Pool(t))
	release := holdSenders(t, ctx, db)
	before := store.SharedPipelines(db)

	type call struct {
		sql  string
		arg  int
		want int
		err  func(error) bool
	}
	calls := []call{
		{sql: "$1::int", arg: 1, want: 1},
		{sql: "$1::int WHERE false", arg: 2, err: func(err error) bool { return errors.Is(err, errNoRow) }},
		{sql: "1 / $1::int", arg: 0, err: func(err error) bool { return store.SQLState(err) == pgerrcode.DivisionByZero }},
		{sql: "$1::int", arg: 3, want: 3},
		{sql: "$1::int + 1", arg: 4, want: 5},
	}
	got := make([]int, len(calls))
	errc := make([]chan error, len(calls))
	for i, c := range calls {
		errc[i] = make(chan error, 1)
		go func() {
			var b store.Batch
			queueInt(&b, &got[i], c.sql, c.arg)
			errc[i] <- db.SendShared(ctx, &b)
		}()
		waitShared(t, func() bool { return store.SharedPending(db) == i+1 }, "call %d queued", i)
	}
	release()
	for i, c := range calls {
		err := <-errc[i]
		switch {
		case c.err != nil && !c.err(err):
			t.Errorf("call %d (SELECT %s): error %v, not the one expected", i, c.sql, err)
		case c.err == nil && err != nil:
			t.Errorf("call %d (SELECT %s): %v", i, c.sql, err)
		case c.err == nil && got[i] != c.want:
			t.Errorf("call %d (SELECT %s): got %d, want %d", i, c.sql, got[i], c.want)
		}
	}
	if n := store.SharedPipelines(db) - before; n != 1 {
		t.Errorf("the %d queued calls went out in %d shared pipelines, want 1", len(calls), n)
	}
}

// TestSendSharedManyCallersEachGetTheirOwn: under concurrent load, calls
// share pipelines and every caller gets its own rows.
func TestSendSharedManyCallersEachGetTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := store.New(storetest.Pool(t))
	const callers, each = 32, 50
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				want := c*1000 + i
				var b store.Batch
				var v int
				var s string
				queueInt(&b, &v, "$1::int", want)
				store.QueueOne(&b, &s, "SELECT $1::text", false, func(r pgx.Row) (string, error) {
					var s string
					return s, r.Scan(&s)
				}, errNoRow, fmt.Sprint("s", want))
				if err := db.SendShared(ctx, &b); err != nil {
					t.Errorf("caller %d: %v", c, err)
					return
				}
				if v != want || s != fmt.Sprint("s", want) {
					t.Errorf("caller %d got (%d, %q), want (%d, s%d)", c, v, s, want, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if store.SharedPipelines(db) == 0 {
		t.Errorf("%d concurrent callers never shared a pipeline", callers)
	}
	waitShared(t, func() bool { return store.SharedSenders(db) == 0 }, "senders to finish")
}

// TestSendSharedCallerGivesUp: a caller whose context ends stops waiting at
// once; the pipeline it was queued for still runs for the others, and no
// sender slot is lost.
func TestSendSharedCallerGivesUp(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := store.New(storetest.Pool(t))
	release := holdSenders(t, ctx, db)

	quitting, quit := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		var b store.Batch
		var v int
		queueInt(&b, &v, "$1::int", 1)
		gaveUp <- db.SendShared(quitting, &b)
	}()
	waitShared(t, func() bool { return store.SharedPending(db) == 1 }, "the quitting call queued")
	stays := make(chan error, 1)
	var v int
	go func() {
		var b store.Batch
		queueInt(&b, &v, "$1::int", 7)
		stays <- db.SendShared(ctx, &b)
	}()
	waitShared(t, func() bool { return store.SharedPending(db) == 2 }, "the staying call queued")
	quit()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the caller that gave up got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller that gave up is still waiting")
	}
	release()
	if err := <-stays; err != nil || v != 7 {
		t.Errorf("the caller that stayed got (%d, %v), want (7, nil)", v, err)
	}
	waitShared(t, func() bool { return store.SharedSenders(db) == 0 }, "senders to finish")
	var b store.Batch
	var w int
	queueInt(&b, &w, "$1::int", 9)
	if err := db.SendShared(ctx, &b); err != nil || w != 9 {
		t.Errorf("a call afterwards got (%d, %v), want (9, nil)", w, err)
	}
}

// TestQueryRowSharedReadsOneRow: QueryRowShared reads its row when Scan is
// called, in a pipeline it shares with calls queued at the same time, and
// no row is pgx.ErrNoRows, as with QueryRow.
func TestQueryRowSharedReadsOneRow(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := store.New(storetest.Pool(t))
	release := holdSenders(t, ctx, db)
	results := make(chan error, 2)
	var a, c int
	var b string
	go func() { results <- db.QueryRowShared(ctx, "SELECT $1::int, $2::text", 3, "x").Scan(&a, &b) }()
	go func() { results <- db.QueryRowShared(ctx, "SELECT 1 WHERE false").Scan(&c) }()
	waitShared(t, func() bool { return store.SharedPending(db) == 2 }, "both reads queued")
	pipelines := store.SharedPipelines(db)
	release()
	var gotNoRows bool
	for range 2 {
		switch err := <-results; {
		case errors.Is(err, pgx.ErrNoRows):
			gotNoRows = true
		case err != nil:
			t.Fatal(err)
		}
	}
	if a != 3 || b != "x" || !gotNoRows {
		t.Errorf("read %d, %q (want 3, \"x\"); no row reported as pgx.ErrNoRows: %v", a, b, gotNoRows)
	}
	if n := store.SharedPipelines(db) - pipelines; n < 1 {
		t.Errorf("the two reads went out in %d shared pipelines, want them in one", n)
	}
}
