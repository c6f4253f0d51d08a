package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpuplane/gpuplane/internal/store"
)

// readAhead is one member's part of a test Prefetch: the row named id,
// read as id || '-seen'.
type readAhead struct {
	id     string
	got    string
	failed error
}

// prefetchLog is a test Prefetch that records its reads and what its
// members saw.
type prefetchLog struct {
	p *store.Prefetch
	// sql is what each item's read runs ($1 is its id).
	sql string

	mu    sync.Mutex
	reads [][]string // the ids of each Read call
	runs  []string   // "<id> prefetched=<bool> got=<got>" per member run
}

func newPrefetchLog(sql string) *prefetchLog {
	l := &prefetchLog{sql: sql}
	l.p = &store.Prefetch{Done: func(item any) { l.record("done " + item.(*readAhead).id) }, Read: func(b *store.Batch, items []any) {
		var ids []string
		for _, it := range items {
			ra := it.(*readAhead)
			ra.got, ra.failed = "", nil
			ids = append(ids, ra.id)
			b.Guarded(func(err error) { ra.failed = err }, func(b *store.Batch) {
				store.QueueOne(b, &ra.got, l.sql, false, func(r pgx.Row) (string, error) {
					var s string
					return s, r.Scan(&s)
				}, errNoRow, ra.id)
			})
		}
		l.mu.Lock()
		l.reads = append(l.reads, ids)
		l.mu.Unlock()
	}}
	return l
}

// member is a prefetched change that records what it saw, then runs write.
func (l *prefetchLog) member(ctx context.Context, db *store.DB, key, id string, write func(tx *store.Tx, attempt int) error) func() error {
	ra := &readAhead{id: id}
	attempt := 0
	return func() error {
		return db.InGroupTxPrefetched(ctx, key, l.p, ra, func(ctx context.Context, tx *store.Tx) error {
			attempt++
			got := ra.got
			if ra.failed != nil {
				got = "(" + ra.failed.Error() + ")"
			}
			l.record(fmt.Sprintf("%s prefetched=%v got=%s", id, tx.Prefetched(), got))
			return write(tx, attempt)
		})
	}
}

func (l *prefetchLog) record(s string) {
	l.mu.Lock()
	l.runs = append(l.runs, s)
	l.mu.Unlock()
}

func (l *prefetchLog) check(t *testing.T, wantReads string, wantRuns ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if got := fmt.Sprint(l.reads); got != wantReads {
		t.Errorf("Read calls: %s, want %s", got, wantReads)
	}
	if !slices.Equal(l.runs, wantRuns) {
		t.Errorf("member runs:\n  %s\nwant\n  %s", strings.Join(l.runs, "\n  "), strings.Join(wantRuns, "\n  "))
	}
}

func deferInsert(id string) func(tx *store.Tx, attempt int) error {
	return func(tx *store.Tx, _ int) error {
		tx.ExecDeferred("INSERT INTO group_members VALUES ($1, pg_current_xact_id()::text, '')", id)
		return nil
	}
}

func seedRows(t *testing.T, ctx context.Context, db *store.DB, ids ...string) {
	t.Helper()
	if err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		for _, id := range ids {
			if err := insertMember(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

const readSeen = "SELECT id || '-seen' FROM group_members WHERE id = $1"

// TestPrefetchReadsAheadForTheBatch: the members of a batch that share a
// Prefetch have their reads made in one round trip before any of them
// runs, in the order they came, each read's failure kept its member's; they
// run first (a change without the prefetch that came before them runs
// after), and the batch waits for the database twice in all: the reads,
// then the members' writes with COMMIT.
func TestPrefetchReadsAheadForTheBatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	seedRows(t, ctx, db, "p0", "p2")
	l := newPrefetchLog(readSeen)
	const key = "dept-p"
	before := db.GroupStats()
	results := lineUp(t, ctx, db, key,
		func() error {
			return db.InGroupTx(ctx, key, func(ctx context.Context, tx *store.Tx) error {
				l.record(fmt.Sprintf("plain prefetched=%v", tx.Prefetched()))
				return deferInsert("plain-done")(tx, 1)
			})
		},
		l.member(ctx, db, key, "p0", deferInsert("p0-done")),
		l.member(ctx, db, key, "p1", deferInsert("p1-done")), // no row p1
		l.member(ctx, db, key, "p2", deferInsert("p2-done")),
	)
	for i, err := range results {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	l.check(t, "[[p0 p1 p2]]",
		"p0 prefetched=true got=p0-seen", "done p0",
		"p1 prefetched=true got=(no row)", "done p1",
		"p2 prefetched=true got=p2-seen", "done p2",
		"plain prefetched=false")
	got := db.GroupStats()
	// The blocker: its insert and COMMIT, 2 round trips.
	want := store.GroupStats{Batches: before.Batches + 2, Members: before.Members + 5, RoundTrips: before.RoundTrips + 2 + 2}
	if got != want {
		t.Errorf("GroupStats = %+v, want %+v", got, want)
	}
	if got := fmt.Sprint(rows(ctx, "")); got != "[blocker p0 p0-done p1-done p2 p2-done plain-done]" {
		t.Errorf("rows: %s", got)
	}
}

// TestPrefetchNotUsedAlone: a change alone in its batch reads for itself.
func TestPrefetchNotUsedAlone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	seedRows(t, ctx, db, "solo")
	l := newPrefetchLog(readSeen)
	if err := l.member(ctx, db, "dept-q", "solo", deferInsert("solo-done"))(); err != nil {
		t.Fatal(err)
	}
	l.check(t, "[]", "solo prefetched=false got=")
	if got := fmt.Sprint(rows(ctx, "")); got != "[solo solo-done]" {
		t.Errorf("rows: %s", got)
	}
}

// TestPrefetchGivesWayAfterAnEarlierMemberRollsBack: when a member's write
// fails and the batch rolls back to that member, the members after it run
// again, and then they read for themselves: what was prefetched for them
// was read before the member that rolled back ran.
func TestPrefetchGivesWayAfterAnEarlierMemberRollsBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	seedRows(t, ctx, db, "taken")
	l := newPrefetchLog(readSeen)
	const key = "dept-r"
	results := lineUp(t, ctx, db, key,
		l.member(ctx, db, key, "taken", deferInsert("m0")),
		l.member(ctx, db, key, "m1", deferInsert("taken")), // a duplicate key, found at the flush
		l.member(ctx, db, key, "m2", deferInsert("m2")),
	)
	var pgErr *pgconn.PgError
	if results[0] != nil || results[2] != nil || !errors.As(results[1], &pgErr) || pgErr.Code != pgerrcode.UniqueViolation {
		t.Fatalf("results %v, want nil, a unique violation, nil", results)
	}
	// Done follows each callback that succeeded; m1's write fails only
	// at the flush, after which nothing prefetched is used again.
	l.check(t, "[[taken m1 m2]]",
		"taken prefetched=true got=taken-seen", "done taken",
		"m1 prefetched=true got=(no row)", "done m1",
		"m2 prefetched=true got=(no row)", "done m2",
		"m2 prefetched=false got=(no row)")
	if got := fmt.Sprint(rows(ctx, "")); got != "[blocker m0 m2 taken]" {
		t.Errorf("rows: %s, want [blocker m0 m2 taken]", got)
	}
}

// TestPrefetchThatFailsIsUndone: a prefetch that fails in the database
// (here a division by zero in one member's read) is rolled back, and every
// member reads for itself; nobody gets its error.
func TestPrefetchThatFailsIsUndone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	l := newPrefetchLog("SELECT CASE WHEN $1 = 'f1' THEN (1/0)::text ELSE $1 || '-seen' END")
	const key = "dept-s"
	results := lineUp(t, ctx, db, key,
		l.member(ctx, db, key, "f0", deferInsert("f0")),
		l.member(ctx, db, key, "f1", deferInsert("f1")),
		l.member(ctx, db, key, "f2", deferInsert("f2")),
	)
	for i, err := range results {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	// What the failed prefetch left in the items is not for use.
	l.mu.Lock()
	runs := slices.Clone(l.runs)
	l.mu.Unlock()
	if len(runs) != 3 {
		t.Fatalf("member runs %q, want one each", runs)
	}
	for i, r := range runs {
		if want := fmt.Sprintf("f%d prefetched=false ", i); !strings.HasPrefix(r, want) {
			t.Errorf("run %d: %s, want %s...", i, r, want)
		}
	}
	if got := fmt.Sprint(rows(ctx, "")); got != "[blocker f0 f1 f2]" {
		t.Errorf("rows: %s", got)
	}
}

// TestPrefetchedMemberRetriedReadsItself: a member run again after a
// deadlock reads for itself (it may have been waiting behind a change to
// its own rows); the members after it still use their prefetch.
func TestPrefetchedMemberRetriedReadsItself(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	seedRows(t, ctx, db, "d0", "d1", "d2")
	l := newPrefetchLog(readSeen)
	const key = "dept-t"
	deadlockOnce := func(tx *store.Tx, attempt int) error {
		if attempt == 1 {
			return &pgconn.PgError{Code: pgerrcode.DeadlockDetected, Message: "deadlock detected (test)"}
		}
		return deferInsert("d1-done")(tx, attempt)
	}
	results := lineUp(t, ctx, db, key,
		l.member(ctx, db, key, "d0", deferInsert("d0-done")),
		l.member(ctx, db, key, "d1", deadlockOnce),
		l.member(ctx, db, key, "d2", deferInsert("d2-done")),
	)
	for i, err := range results {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	// Done follows the member's success, not its failed first run.
	l.check(t, "[[d0 d1 d2]]",
		"d0 prefetched=true got=d0-seen", "done d0",
		"d1 prefetched=true got=d1-seen",
		"d1 prefetched=false got=d1-seen", "done d1",
		"d2 prefetched=true got=d2-seen", "done d2")
	if got := fmt.Sprint(rows(ctx, "")); got != "[blocker d0 d0-done d1 d1-done d2 d2-done]" {
		t.Errorf("rows: %s", got)
	}
}
