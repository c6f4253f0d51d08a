package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// A filter on one incarnation's events reads that incarnation's rows, not
// the history before them: the list's page costs the same however many
// events the platform has recorded since.
func TestListByResourceUIDReadsOnlyItsRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := storetest.Pool(t)
	const target = "4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b"
	// The target's three events come first, so that a list that walks the
	// history newest first passes every later event before finding them.
	if _, err := pool.Exec(ctx, `
		INSERT INTO audit_events (actor, action, resource, resource_uid)
		SELECT 'alice', 'UpdateVirtualCluster', 'teams/a/virtualClusters/target', $1::uuid FROM generate_series(1, 3)`, target); err != nil {
		t.Fatal(err)
	}
	const history = 20_000
	if _, err := pool.Exec(ctx, `
		INSERT INTO audit_events (actor, action, resource, resource_uid)
		SELECT 'bob', 'UpdateVirtualCluster', 'teams/a/virtualClusters/vc-' || g,
		       CASE WHEN g % 4 = 0 THEN NULL ELSE gen_random_uuid() END
		  FROM generate_series(1, $1::int) g`, history); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE audit_events`); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	got, more, err := audit.List(ctx, tx, 10, `resource_uid = "`+target+`"`, audit.FirstPage, store.Scope{All: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || more {
		t.Fatalf("listed %d events (more: %v), want the target's 3", len(got), more)
	}
	for i, e := range got {
		if e.ResourceUID != target {
			t.Errorf("event %d is of %q, want %q", e.ID, e.ResourceUID, target)
		}
		if i > 0 && e.ID >= got[i-1].ID {
			t.Errorf("event %d follows event %d: want newest first", e.ID, got[i-1].ID)
		}
	}
	// What this transaction read of the table so far (statistics of the
	// current transaction).
	var seqRead, idxFetched int64
	if err := tx.QueryRow(ctx, `SELECT seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables
		WHERE relname = 'audit_events'`).Scan(&seqRead, &idxFetched); err != nil {
		t.Fatal(err)
	}
	if read := seqRead + idxFetched; read > 10 {
		t.Errorf("listing 3 events of one incarnation read %d rows of a %d-event history (sequential %d, by index %d)",
			read, history+3, seqRead, idxFetched)
	}

	// Every other event: those without an incarnation too.
	others, _, err := audit.List(ctx, tx, 500, `resource_uid != "`+target+`"`, audit.FirstPage, store.Scope{All: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(others) != 500 {
		t.Fatalf("listed %d events other than the target's, want a full page of 500", len(others))
	}
	withoutUID := 0
	for _, e := range others {
		switch e.ResourceUID {
		case target:
			t.Fatalf("event %d is the target's, listed with != ", e.ID)
		case "":
			withoutUID++
		}
	}
	if withoutUID == 0 {
		t.Errorf("!= listed no event without an incarnation; want them (a quarter of the history)")
	}
}
