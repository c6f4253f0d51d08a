package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

type ctxKey struct{}

// groupFixture is a table of rows written by members, with the id of the
// transaction that wrote each, and a way to hold the first batch of a key
// open until the test has queued the rest behind it.
func groupFixture(t *testing.T) (*store.DB, func(ctx context.Context, id string) []string) {
	t.Helper()
	pool := storetest.Pool(t)
	mustExec(t, pool, "CREATE TABLE group_members (id text PRIMARY KEY, xid text NOT NULL, who text NOT NULL)")
	rows := func(ctx context.Context, where string) []string {
		r, err := pool.Query(ctx, "SELECT id FROM group_members "+where+" ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			var id string
			if err := r.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	return store.New(pool), rows
}

func insertMember(ctx context.Context, tx *store.Tx, id string) error {
	who, _ := ctx.Value(ctxKey{}).(string)
	_, err := tx.Exec(ctx, "INSERT INTO group_members VALUES ($1, pg_current_xact_id()::text, $2)", id, who)
	return err
}

// queueBehind starts a member of key that blocks inside its transaction
// until release is closed, so that everything queued meanwhile forms the
// next batch; it returns once that member is running.
func queueBehind(t *testing.T, ctx context.Context, db *store.DB, key string) (release func(), done <-chan error) {
	t.Helper()
	return storetest.HoldGroup(t, ctx, db, key, insertBlocker)
}

func insertBlocker(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "blocker") }

// TestGroupTxMembersShareOneTransaction: what queues behind a running
// batch commits in one transaction, each member with its own values.
func TestGroupTxMembersShareOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, _ := groupFixture(t)
	const n = 10
	runBehindBlocker(t, ctx, db, "dept-a", n, func(i int) (context.Context, string) {
		return context.WithValue(ctx, ctxKey{}, fmt.Sprintf("caller-%d", i)), fmt.Sprintf("m%02d", i)
	})

	var xids, bad int
	if err := db.QueryRow(ctx, `SELECT count(DISTINCT xid), count(*) FILTER (WHERE who <> 'caller-' || substring(id from 2)::int::text)
		FROM group_members WHERE id LIKE 'm%'`).Scan(&xids, &bad); err != nil {
		t.Fatal(err)
	}
	if xids != 1 {
		t.Errorf("the %d members queued behind one batch committed in %d transactions, want 1", n, xids)
	}
	if bad != 0 {
		t.Errorf("%d members recorded another caller's context value", bad)
	}
}

// runBehindBlocker queues n members of key behind a blocker (queueBehind),
// so that they form one batch, then releases it; member i inserts the row
// named by member(i) with member(i)'s context. Any failure fails the test.
func runBehindBlocker(t *testing.T, ctx context.Context, db *store.DB, key string, n int, member func(i int) (context.Context, string)) {
	t.Helper()
	calls := make([]func() error, n)
	for i := range calls {
		mctx, id := member(i)
		calls[i] = func() error {
			return db.InGroupTx(mctx, key, func(ctx context.Context, tx *store.Tx) error {
				return insertMember(ctx, tx, id)
			})
		}
	}
	for i, err := range lineUp(t, ctx, db, key, calls...) {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
}

// lineUp is storetest.LineUp behind a blocker that writes the row
// "blocker".
func lineUp(t *testing.T, ctx context.Context, db *store.DB, key string, calls ...func() error) []error {
	t.Helper()
	return storetest.LineUp(t, ctx, db, key, insertBlocker, calls...)
}

// waitQueued waits until n members of key wait behind the running batch.
func waitQueued(t *testing.T, db *store.DB, key string, n int) {
	t.Helper()
	storetest.WaitGroupPending(t, db, key, n)
}

// TestGroupTxFailingMemberLeavesOthersIntact: a member that fails (here a
// duplicate key after an insert of its own) is rolled back alone: its own
// earlier writes vanish, the batch's other members commit, and the error
// it gets is PostgreSQL's, so it is classified as it would be alone.
func TestGroupTxFailingMemberLeavesOthersIntact(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	members := []func(ctx context.Context, tx *store.Tx) error{
		func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "ok-1") },
		func(ctx context.Context, tx *store.Tx) error {
			if err := insertMember(ctx, tx, "half-written"); err != nil {
				return err
			}
			return insertMember(ctx, tx, "ok-1") // duplicate of the member before
		},
		func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "ok-2") },
	}
	calls := make([]func() error, len(members))
	for i, fn := range members {
		calls[i] = func() error { return db.InGroupTx(ctx, "dept-b", fn) }
	}
	results := lineUp(t, ctx, db, "dept-b", calls...)
	if results[0] != nil || results[2] != nil {
		t.Fatalf("members beside the failing one failed: %v, %v", results[0], results[2])
	}
	var pgErr *pgconn.PgError
	if !errors.As(results[1], &pgErr) || pgErr.Code != pgerrcode.UniqueViolation {
		t.Fatalf("failing member got %v, want a unique violation", results[1])
	}
	if got := fmt.Sprint(rows(ctx, "")); got != "[blocker ok-1 ok-2]" {
		t.Errorf("rows after the batch: %s, want [blocker ok-1 ok-2] (nothing of the failed member)", got)
	}
}

// TestGroupTxCancelledWhileQueued: a caller that gives up before its turn
// gets its context's error and writes nothing; the others are unaffected.
func TestGroupTxCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	release, blocker := queueBehind(t, ctx, db, "dept-c")

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 2)
	go func() {
		errc <- db.InGroupTx(cctx, "dept-c", func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "cancelled") })
	}()
	waitQueued(t, db, "dept-c", 1)
	go func() {
		errc <- db.InGroupTx(ctx, "dept-c", func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "kept") })
	}()
	waitQueued(t, db, "dept-c", 2)
	cancel()
	release()
	var cancelled, ok int
	for range 2 {
		switch err := <-errc; {
		case errors.Is(err, context.Canceled):
			cancelled++
		case err == nil:
			ok++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if cancelled != 1 || ok != 1 {
		t.Fatalf("%d cancelled and %d ok, want 1 and 1", cancelled, ok)
	}
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rows(ctx, "")); got != "[blocker kept]" {
		t.Errorf("rows: %s, want [blocker kept]", got)
	}
}

// TestGroupTxKeysAreIndependent: a batch of one key does not hold up
// another key's changes.
func TestGroupTxKeysAreIndependent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	release, blocker := queueBehind(t, ctx, db, "dept-d")
	defer func() {
		release()
		if err := <-blocker; err != nil {
			t.Error(err)
		}
	}()
	other := make(chan error, 1)
	go func() {
		other <- db.InGroupTx(ctx, "dept-e", func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "other") })
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a change of dept-e waited behind dept-d's open batch")
	}
	if got := fmt.Sprint(rows(ctx, "")); got != "[other]" {
		t.Errorf("rows while dept-d's batch is open: %s, want [other]", got)
	}
}

// TestGroupStatsCountBatchesMembersAndRoundTrips: the counters behind the
// group-commit metrics say how many batches ran, how many changes they
// carried and how often they waited for the database, exactly.
func TestGroupStatsCountBatchesMembersAndRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, _ := groupFixture(t)
	want := func(step string, w store.GroupStats) {
		t.Helper()
		if got := db.GroupStats(); got != w {
			t.Fatalf("after %s: GroupStats = %+v, want %+v", step, got, w)
		}
	}
	want("nothing", store.GroupStats{})

	// A change that only defers its write: BEGIN, the write and COMMIT
	// travel in one round trip.
	if err := db.InGroupTx(ctx, "dept-s", func(ctx context.Context, tx *store.Tx) error {
		tx.ExecDeferred("INSERT INTO group_members VALUES ('deferred', '', '')")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want("a deferred write", store.GroupStats{Batches: 1, Members: 1, RoundTrips: 1})

	// One that waits for its statement: BEGIN with it, then COMMIT.
	if err := db.InGroupTx(ctx, "dept-s", func(ctx context.Context, tx *store.Tx) error {
		return insertMember(ctx, tx, "alone")
	}); err != nil {
		t.Fatal(err)
	}
	want("a statement", store.GroupStats{Batches: 2, Members: 2, RoundTrips: 3})

	// A blocker (its statement and COMMIT: 2 round trips), then the 4
	// changes queued behind it in one batch: each member's SAVEPOINT goes
	// with its statement (4), and one COMMIT.
	const n = 4
	runBehindBlocker(t, ctx, db, "dept-s", n, func(i int) (context.Context, string) {
		return ctx, fmt.Sprintf("q%d", i)
	})
	want("a batch of 4 behind a blocker", store.GroupStats{Batches: 4, Members: 7, RoundTrips: 3 + 2 + n + 1})

	// Changes without a key run as InTx and are not counted.
	if err := db.InGroupTx(ctx, "", func(ctx context.Context, tx *store.Tx) error {
		return insertMember(ctx, tx, "ungrouped")
	}); err != nil {
		t.Fatal(err)
	}
	want("an ungrouped change", store.GroupStats{Batches: 4, Members: 7, RoundTrips: 10})
}
