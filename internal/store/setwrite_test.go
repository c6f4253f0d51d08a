package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpuplane/gpuplane/internal/store"
)

// setRow inserts a row of set_rows; as Many, one per element, in order.
var setRow = &store.SetWrite{
	One: `INSERT INTO set_rows (id, xid, note) VALUES ($1, pg_current_xact_id()::text, $2)`,
	Many: `INSERT INTO set_rows (id, xid, note)
		SELECT u.id, pg_current_xact_id()::text, u.note FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(id, note, n)
		 ORDER BY u.n`,
}

// setFixture is groupFixture with set_rows, whose n tells the order rows
// were written in; rows lists "id:note" by n.
func setFixture(t *testing.T, ctx context.Context) (*store.DB, func() []string) {
	t.Helper()
	db, _ := groupFixture(t)
	if _, err := db.Exec(ctx, `CREATE TABLE set_rows (n bigserial, id text PRIMARY KEY, xid text NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	return db, func() []string {
		r, err := db.Query(ctx, `SELECT id || ':' || coalesce(note, 'null') FROM set_rows ORDER BY n`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			var s string
			if err := r.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
}

// setMember is a change that writes the rows ids with setRow and sends
// nothing of its own (its writes wait for the batch's last round trip,
// which ends with COMMIT).
func setMember(ctx context.Context, db *store.DB, key string, note *string, ids ...string) func() error {
	return func() error {
		return db.InGroupTx(ctx, key, func(ctx context.Context, tx *store.Tx) error {
			for _, id := range ids {
				tx.ExecDeferredSet(setRow, id, note)
			}
			return nil
		})
	}
}

// TestSetWritesOfABatchGoOutTogether: members of one batch that queued the
// same writes have them made in one statement per write, member after
// member and in each member's order (NULLs kept), in one transaction, in
// the same round trip as COMMIT.
func TestSetWritesOfABatchGoOutTogether(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := setFixture(t, ctx)
	const key = "dept-s"
	x := "x"
	before := db.GroupStats()
	results := lineUp(t, ctx, db, key,
		setMember(ctx, db, key, &x, "a1", "a2"),
		setMember(ctx, db, key, nil, "b1", "b2"),
		setMember(ctx, db, key, &x, "c1", "c2"),
	)
	for i, err := range results {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if got := fmt.Sprint(rows()); got != "[a1:x a2:x b1:null b2:null c1:x c2:x]" {
		t.Errorf("rows in the order written: %s", got)
	}
	var xids int
	if err := db.QueryRow(ctx, `SELECT count(DISTINCT xid) FROM set_rows`).Scan(&xids); err != nil || xids != 1 {
		t.Errorf("written by %d transactions (%v), want 1", xids, err)
	}
	// The blocker (insert, COMMIT), then BEGIN with the set write and
	// COMMIT in one round trip.
	if got := db.GroupStats().Since(before); got != (store.GroupStats{Batches: 2, Members: 4, RoundTrips: 3, SetFlushes: 1}) {
		t.Errorf("GroupStats: %+v", got)
	}
}

// TestSetWritesThatFailAreSentMemberByMember: when the set statement fails
// (here a key two members write), it is undone and every member's writes
// are sent as its own: the member whose write fails gets its error and is
// rolled back alone, the others commit.
func TestSetWritesThatFailAreSentMemberByMember(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := setFixture(t, ctx)
	const key = "dept-t"
	before := db.GroupStats()
	results := lineUp(t, ctx, db, key,
		setMember(ctx, db, key, nil, "a1", "a2"),
		setMember(ctx, db, key, nil, "b", "dup"),
		setMember(ctx, db, key, nil, "dup", "c"),
		setMember(ctx, db, key, nil, "d1", "d2"),
	)
	var pgErr *pgconn.PgError
	if results[0] != nil || results[1] != nil || !errors.As(results[2], &pgErr) || pgErr.Code != pgerrcode.UniqueViolation || results[3] != nil {
		t.Fatalf("results %v, want nil, nil, a unique violation, nil", results)
	}
	if got := fmt.Sprint(rows()); got != "[a1:null a2:null b:null dup:null d1:null d2:null]" {
		t.Errorf("rows: %s", got)
	}
	got := db.GroupStats().Since(before)
	if got.SetFlushes != 0 || got.SetFallbacks != 1 {
		// After the fallback only the fourth member's writes are left to
		// send again: one member, nothing to merge.
		t.Errorf("GroupStats: %+v, want one fallback and no set flush", got)
	}
}

// TestSetWritesNotMergedWithOtherWrites: a batch whose members also queued
// writes that have no set form sends everything as queued.
func TestSetWritesNotMergedWithOtherWrites(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := setFixture(t, ctx)
	const key = "dept-u"
	before := db.GroupStats()
	results := lineUp(t, ctx, db, key,
		setMember(ctx, db, key, nil, "a"),
		func() error {
			return db.InGroupTx(ctx, key, func(ctx context.Context, tx *store.Tx) error {
				tx.ExecDeferred(`INSERT INTO set_rows (id, xid) VALUES ('plain', '')`)
				return nil
			})
		},
		setMember(ctx, db, key, nil, "b"),
	)
	for i, err := range results {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if got := fmt.Sprint(rows()); got != "[a:null plain:null b:null]" {
		t.Errorf("rows: %s", got)
	}
	if got := db.GroupStats().Since(before); got.SetFlushes != 0 || got.SetFallbacks != 0 {
		t.Errorf("GroupStats: %+v, want no set writes tried", got)
	}
}

// TestMappedSetWritesMapTheirOwnMembersFailure: set writes with an error
// mapping merge like the others; when the set statement fails, the member
// whose own row fails gets its mapping of that row's error, and only it.
func TestMappedSetWritesMapTheirOwnMembersFailure(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := setFixture(t, ctx)
	mapped := func(key string, ids ...string) func() error {
		return func() error {
			return db.InGroupTx(ctx, key, func(ctx context.Context, tx *store.Tx) error {
				for _, id := range ids {
					tx.ExecDeferredSetMapped(setRow, func(err error) error {
						if store.SQLState(err) == pgerrcode.UniqueViolation {
							return fmt.Errorf("%s is taken", id)
						}
						return err
					}, id, nil)
				}
				return nil
			})
		}
	}
	before := db.GroupStats()
	for i, err := range lineUp(t, ctx, db, "dept-v", mapped("dept-v", "m1"), mapped("dept-v", "m2"), mapped("dept-v", "m3")) {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if got := db.GroupStats().Since(before); got.SetFlushes != 1 || got.SetFallbacks != 0 {
		t.Fatalf("GroupStats: %+v, want the batch written as one", got)
	}
	// The line-up's blocker writes the same row each time.
	if _, err := db.Exec(ctx, `DELETE FROM group_members`); err != nil {
		t.Fatal(err)
	}
	before = db.GroupStats()
	results := lineUp(t, ctx, db, "dept-w", mapped("dept-w", "n1"), mapped("dept-w", "m2"), mapped("dept-w", "n3"))
	if results[0] != nil || results[1] == nil || results[1].Error() != "m2 is taken" || results[2] != nil {
		t.Fatalf("results %v, want nil, \"m2 is taken\", nil", results)
	}
	if got := db.GroupStats().Since(before); got.SetFallbacks != 1 {
		t.Errorf("GroupStats: %+v, want one fallback", got)
	}
	if got := fmt.Sprint(rows()); got != "[m1:null m2:null m3:null n1:null n3:null]" {
		t.Errorf("rows: %s", got)
	}
}
