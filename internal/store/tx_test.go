package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestInTxRetriesSerializationFailure(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	mustExec(t, pool, "CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)")
	mustExec(t, pool, "INSERT INTO counter VALUES (1, 0)")

	var attempts atomic.Int32
	err := store.New(pool).InTx(ctx, store.TxOptions{Isolation: pgx.Serializable}, func(ctx context.Context, tx *store.Tx) error {
		attempt := attempts.Add(1)
		var n int
		if err := tx.QueryRow(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
			return err
		}
		if attempt == 1 {
			// A competing serializable transaction commits a change to the
			// row we read, after our snapshot was taken.
			err := store.New(pool).InTx(ctx, store.TxOptions{Isolation: pgx.Serializable}, func(ctx context.Context, tx *store.Tx) error {
				_, err := tx.Exec(ctx, "UPDATE counter SET n = n + 10 WHERE id = 1")
				return err
			})
			if err != nil {
				t.Errorf("competing tx: %v", err)
			}
		}
		_, err := tx.Exec(ctx, "UPDATE counter SET n = $1 WHERE id = 1", n+1)
		if attempt == 1 && store.SQLState(err) != "40001" {
			t.Errorf("first attempt: want a serialization failure, got %v", err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if got := attempts.Load(); got != 2 {
		t.Errorf("attempts = %d, want 2", got)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 11 {
		t.Errorf("n = %d, want 11 (neither update may be lost)", n)
	}
}

func TestInTxRetriesDeadlock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	mustExec(t, pool, "CREATE TABLE acct (id int PRIMARY KEY, n int NOT NULL)")
	mustExec(t, pool, "INSERT INTO acct VALUES (1, 0), (2, 0)")

	var attempts atomic.Int32
	var bothLocked sync.WaitGroup
	bothLocked.Add(2)
	// committed[i] closes when transfer i has returned. The victim's retry
	// waits for the other one to commit first: otherwise, on a loaded
	// machine, the retry can take its first row before the winner (just
	// woken) takes it, and the two deadlock again.
	committed := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	transfer := func(i, first, second int) error {
		defer close(committed[i])
		attempt := 0
		return store.New(pool).InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
			attempts.Add(1)
			attempt++
			if attempt > 1 {
				select {
				case <-committed[1-i]:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if _, err := tx.Exec(ctx, "UPDATE acct SET n = n + 1 WHERE id = $1", first); err != nil {
				return err
			}
			if attempt == 1 {
				bothLocked.Done()
				bothLocked.Wait()
			}
			_, err := tx.Exec(ctx, "UPDATE acct SET n = n + 1 WHERE id = $1", second)
			return err
		})
	}
	errc := make(chan error, 2)
	go func() { errc <- transfer(0, 1, 2) }()
	go func() { errc <- transfer(1, 2, 1) }()
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatalf("InTx: %v", err)
		}
	}
	if got := attempts.Load(); got != 3 {
		t.Errorf("attempts = %d, want 3 (one deadlock victim retried once)", got)
	}
	var sum int
	if err := pool.QueryRow(ctx, "SELECT sum(n) FROM acct").Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 4 {
		t.Errorf("sum = %d, want 4", sum)
	}
}

func TestInTxReturnsCallbackErrorAsIsAndRollsBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	mustExec(t, pool, "CREATE TABLE item (id int PRIMARY KEY)")

	want := errs.NotFound("team")
	calls := 0
	err := store.New(pool).InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		calls++
		if _, err := tx.Exec(ctx, "INSERT INTO item VALUES (1)"); err != nil {
			return err
		}
		return want
	})
	if err != want {
		t.Fatalf("err = %#v, want the callback's error itself", err)
	}
	if calls != 1 {
		t.Errorf("calls = %d, want 1", calls)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM item").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("insert was committed despite the error")
	}
}

func TestInTxCommits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	mustExec(t, pool, "CREATE TABLE item (id int PRIMARY KEY)")
	var iso string
	err := store.New(pool).InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO item VALUES (1)")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if iso != "read committed" {
		t.Errorf("default isolation = %q, want read committed", iso)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM item").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count = %d, err = %v; want 1 committed row", n, err)
	}
}

func TestInTxReadOnly(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	mustExec(t, pool, "CREATE TABLE item (id int PRIMARY KEY)")
	err := store.New(pool).InTx(ctx, store.TxOptions{ReadOnly: true}, func(ctx context.Context, tx *store.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO item VALUES (1)")
		return err
	})
	if got := store.SQLState(err); got != "25006" {
		t.Fatalf("SQLSTATE = %q (err %v), want 25006 read_only_sql_transaction", got, err)
	}
}

func TestInTxGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	calls := 0
	err := store.New(pool).InTx(ctx, store.TxOptions{MaxAttempts: 3}, func(ctx context.Context, tx *store.Tx) error {
		calls++
		return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	})
	if calls != 3 {
		t.Errorf("calls = %d, want 3", calls)
	}
	if !store.IsRetryable(err) {
		t.Errorf("IsRetryable(%v) = false", err)
	}
	if k := errs.KindOf(store.Classify(err)); k != errs.KindAborted {
		t.Errorf("Classify kind = %v, want aborted", k)
	}
}

func TestInTxStopsRetryingWhenContextEnds(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	err := store.New(pool).InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		calls++
		cancel()
		return &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	})
	if calls != 1 {
		t.Errorf("calls = %d, want 1", calls)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestInTxPanicReleasesConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	mustExec(t, pool, "CREATE TABLE item (id int PRIMARY KEY)")
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic was swallowed")
			}
		}()
		_ = store.New(pool).InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO item VALUES (1)"); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still acquired after panic", n)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM item").Scan(&n); err != nil || n != 0 {
		t.Errorf("count = %d, err = %v; want the insert rolled back", n, err)
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := storetest.New(t)
	pool, err := store.Open(ctx, dsn, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 3 {
		t.Errorf("MaxConns = %d, want 3", got)
	}
	var app string
	if err := pool.QueryRow(ctx, "SHOW application_name").Scan(&app); err != nil || app != "gpuplane" {
		t.Errorf("application_name = %q, err %v", app, err)
	}

	if _, err := store.Open(ctx, "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", 0); err == nil {
		t.Error("Open of an unreachable server succeeded")
	}
	if _, err := store.Open(ctx, "postgres://%zz", 0); err == nil {
		t.Error("Open of a malformed DSN succeeded")
	}
}
