package store_test

import (
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

func TestMigrateUpDown(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := storetest.NewEmpty(t)
	latest, err := store.LatestSchemaVersion()
	if err != nil || latest == 0 {
		t.Fatalf("LatestSchemaVersion = %d, %v", latest, err)
	}

	pool, err := store.Open(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	checkStatus := func(wantCurrent uint) {
		t.Helper()
		v, dirty, err := store.SchemaVersion(ctx, dsn)
		if err != nil || v != wantCurrent || dirty {
			t.Fatalf("SchemaVersion = %d, dirty %v, err %v; want %d", v, dirty, err, wantCurrent)
		}
		cur, lat, dirty, err := store.SchemaStatus(ctx, pool)
		if err != nil || cur != wantCurrent || lat != latest || dirty {
			t.Fatalf("SchemaStatus = %d/%d dirty %v err %v; want %d/%d", cur, lat, dirty, err, wantCurrent, latest)
		}
	}

	// Before golang-migrate has created its table.
	cur, _, _, err := store.SchemaStatus(ctx, pool)
	if err != nil || cur != 0 {
		t.Fatalf("SchemaStatus on an empty database = %d, %v", cur, err)
	}
	checkStatus(0)

	if err := store.MigrateUp(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	checkStatus(latest)
	if err := store.MigrateUp(ctx, dsn); err != nil {
		t.Fatalf("second MigrateUp should be a no-op: %v", err)
	}

	if err := store.MigrateDown(ctx, dsn, 1); err != nil {
		t.Fatal(err)
	}
	v, _, err := store.SchemaVersion(ctx, dsn)
	if err != nil || v >= latest {
		t.Fatalf("after one step down: version %d, err %v", v, err)
	}
	if err := store.MigrateDown(ctx, dsn, 0); err != nil {
		t.Fatal(err)
	}
	checkStatus(0)
	if err := store.MigrateDown(ctx, dsn, 0); err != nil {
		t.Fatalf("MigrateDown with nothing applied: %v", err)
	}

	// The down migrations must leave nothing behind that blocks a re-run.
	if err := store.MigrateUp(ctx, strings.Replace(dsn, "postgres://", "pgx5://", 1)); err != nil {
		t.Fatalf("MigrateUp after a full down (pgx5:// DSN): %v", err)
	}
	checkStatus(latest)
}

func TestTemplateDatabaseIsMigrated(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := storetest.Pool(t)
	cur, latest, dirty, err := store.SchemaStatus(ctx, pool)
	if err != nil || cur != latest || dirty {
		t.Fatalf("SchemaStatus = %d/%d dirty %v err %v", cur, latest, dirty, err)
	}
}

func TestMigrateUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	if err := store.MigrateUp(ctx, "postgres://x@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"); err == nil {
		t.Fatal("MigrateUp against an unreachable server succeeded")
	}
}
