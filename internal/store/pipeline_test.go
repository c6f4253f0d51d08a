package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"

	"github.com/gpuplane/gpuplane/internal/store"
)

// inOrder queues members of key behind a held batch one after another, so
// that the next batch runs them in the order given, then releases it and
// returns each member's answer.
func inOrder(t *testing.T, ctx context.Context, db *store.DB, key string, members ...func(ctx context.Context, tx *store.Tx) error) []error {
	t.Helper()
	release, blocker := queueBehind(t, ctx, db, key)
	answers := make([]chan error, len(members))
	for i, fn := range members {
		answers[i] = make(chan error, 1)
		go func() { answers[i] <- db.InGroupTx(ctx, key, fn) }()
		waitQueued(t, db, key, i+1)
	}
	release()
	if err := <-blocker; err != nil {
		t.Fatalf("blocker: %v", err)
	}
	out := make([]error, len(members))
	for i := range members {
		out[i] = <-answers[i]
	}
	return out
}

const duplicate = "INSERT INTO group_members VALUES ('taken', 'x', 'dup')"

// takenFixture is groupFixture with a row "taken" in place, which
// duplicate then cannot insert again.
func takenFixture(t *testing.T, ctx context.Context) (*store.DB, func(ctx context.Context, where string) []string) {
	t.Helper()
	db, rows := groupFixture(t)
	if err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "taken") }); err != nil {
		t.Fatal(err)
	}
	return db, rows
}

func isUniqueViolation(err error) bool { return store.SQLState(err) == pgerrcode.UniqueViolation }

// A deferred write goes out with the next member's first statement; when it
// fails there, the failure is its own member's: that member's other writes
// are rolled back, and the member whose round trip carried it runs again
// and succeeds, even when its callback turned the error into another one.
func TestGroupTxDeferredFailureBelongsToItsMember(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := takenFixture(t, ctx)
	bRuns := 0
	got := inOrder(t, ctx, db, "dept-p",
		func(ctx context.Context, tx *store.Tx) error {
			if err := insertMember(ctx, tx, "a1"); err != nil {
				return err
			}
			tx.ExecDeferred(duplicate)
			return nil
		},
		func(ctx context.Context, tx *store.Tx) error {
			bRuns++
			if err := insertMember(ctx, tx, "b1"); err != nil {
				if isUniqueViolation(err) {
					return errors.New("b1 is taken") // a callback mapping the error it saw
				}
				return err
			}
			return nil
		},
		func(ctx context.Context, tx *store.Tx) error {
			tx.ExecDeferred("INSERT INTO group_members VALUES ('c1', 'x', 'c')")
			return nil
		})
	if !isUniqueViolation(got[0]) {
		t.Errorf("member a: %v, want its deferred write's unique violation", got[0])
	}
	if got[1] != nil || got[2] != nil {
		t.Errorf("members b and c: %v, %v, want both to succeed", got[1], got[2])
	}
	if bRuns != 2 {
		t.Errorf("member b ran %d times, want 2 (once more after a's failure surfaced in its round trip)", bRuns)
	}
	if got, want := rows(ctx, ""), "[b1 blocker c1 taken]"; fmt.Sprint(got) != want {
		t.Errorf("rows %v, want %s (a's own insert rolled back with its failed deferred write)", got, want)
	}
}

// The last members' deferred writes go out with COMMIT; a failure among
// them makes PostgreSQL skip the COMMIT, so it is still one member's and
// the others commit.
func TestGroupTxLastMembersDeferredFailure(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := takenFixture(t, ctx)
	got := inOrder(t, ctx, db, "dept-q",
		func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "a1") },
		func(ctx context.Context, tx *store.Tx) error {
			if err := insertMember(ctx, tx, "b0"); err != nil {
				return err
			}
			tx.ExecDeferred(duplicate)
			return nil
		})
	if got[0] != nil || !isUniqueViolation(got[1]) {
		t.Errorf("answers %v, want a to succeed and b to get its unique violation", got)
	}
	if got, want := rows(ctx, ""), "[a1 blocker taken]"; fmt.Sprint(got) != want {
		t.Errorf("rows %v, want %s", got, want)
	}
}

// A member that fails before any of its statements reached the server must
// not roll back to an earlier member's savepoint: the earlier member's
// writes, sent or still queued, commit.
func TestGroupTxMemberFailingBeforeItsFirstStatementKeepsEarlierWork(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := groupFixture(t)
	refused := errors.New("refused")
	got := inOrder(t, ctx, db, "dept-r",
		func(ctx context.Context, tx *store.Tx) error { return insertMember(ctx, tx, "a1") }, // sent at once
		func(ctx context.Context, tx *store.Tx) error { return refused },
		func(ctx context.Context, tx *store.Tx) error {
			tx.ExecDeferred("INSERT INTO group_members VALUES ('c1', 'x', 'c')") // still queued
			return nil
		},
		func(ctx context.Context, tx *store.Tx) error { return refused })
	if got[0] != nil || !errors.Is(got[1], refused) || got[2] != nil || !errors.Is(got[3], refused) {
		t.Errorf("answers %v, want nil, refused, nil, refused", got)
	}
	if got, want := rows(ctx, ""), "[a1 blocker c1]"; fmt.Sprint(got) != want {
		t.Errorf("rows %v, want %s", got, want)
	}
}

// Outside groups a deferred write that fails surfaces at COMMIT: nothing
// of the transaction is kept, and the error keeps its SQLSTATE.
func TestInTxDeferredFailureFailsTheCommit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db, rows := takenFixture(t, ctx)
	err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		if err := insertMember(ctx, tx, "x1"); err != nil {
			return err
		}
		tx.ExecDeferred(duplicate)
		return nil
	})
	if !isUniqueViolation(err) {
		t.Fatalf("InTx: %v, want the deferred write's unique violation", err)
	}
	if got := rows(ctx, ""); fmt.Sprint(got) != "[taken]" {
		t.Errorf("rows %v, want only [taken]", got)
	}
	// Deferred writes alone are sent with BEGIN and COMMIT in one round
	// trip, and commit.
	if err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		tx.ExecDeferred("INSERT INTO group_members VALUES ('d1', pg_current_xact_id()::text, 'd')")
		tx.ExecDeferred("INSERT INTO group_members VALUES ('d2', pg_current_xact_id()::text, 'd')")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var xids int
	if err := db.QueryRow(ctx, `SELECT count(DISTINCT xid) FROM group_members WHERE id IN ('d1', 'd2')`).Scan(&xids); err != nil || xids != 1 {
		t.Errorf("d1 and d2 written by %d transactions (%v), want 1", xids, err)
	}
	// A transaction that sends nothing has nothing to commit.
	if err := db.InTx(ctx, store.TxOptions{}, func(context.Context, *store.Tx) error { return nil }); err != nil {
		t.Errorf("empty transaction: %v", err)
	}
}
