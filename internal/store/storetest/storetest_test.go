package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestDatabasesAreIsolatedAndDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var first string
	t.Run("first", func(t *testing.T) {
		first = storetest.New(t)
		second := storetest.New(t)
		if first == second {
			t.Fatal("two calls returned the same database")
		}
		c1, err := pgx.Connect(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close(ctx)
		if _, err := c1.Exec(ctx, "CREATE TABLE only_here (id int)"); err != nil {
			t.Fatal(err)
		}
		c2, err := pgx.Connect(ctx, second)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close(ctx)
		if _, err := c2.Exec(ctx, "SELECT * FROM only_here"); store.SQLState(err) != "42P01" {
			t.Fatalf("table leaked into another test's database (err %v)", err)
		}
		// Left open on purpose: cleanup must cope with open sessions.
	})

	_, err := pgx.Connect(ctx, first)
	if store.SQLState(err) != "3D000" {
		t.Fatalf("database still exists after its test ended (connect err %v)", err)
	}
}

func TestPoolIsMigrated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := storetest.Pool(t)
	cur, latest, dirty, err := store.SchemaStatus(ctx, pool)
	if err != nil || cur == 0 || cur != latest || dirty {
		t.Fatalf("SchemaStatus = %d/%d dirty %v err %v", cur, latest, dirty, err)
	}
}

func TestParallelDatabases(t *testing.T) {
	for i := range 8 {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pool := storetest.Pool(t)
			// Same table name in every subtest: only separate databases
			// let them all succeed.
			if _, err := pool.Exec(ctx, "CREATE TABLE t (i int)"); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
				t.Fatalf("count = %d, err %v", n, err)
			}
		})
	}
}
