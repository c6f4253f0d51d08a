package workqueue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// seed stores department d, team t and one virtual cluster per phase given,
// named after the phase (test setup SQL).
func seed(t *testing.T, pool *pgxpool.Pool, phases ...virtualcluster.Phase) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO departments (id, admin_groups) VALUES ('d', '{}')`,
		`INSERT INTO teams (id, department_id, isolation_tier) VALUES ('t', 'd', 'SHARED')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range phases {
		if _, err := pool.Exec(ctx, `INSERT INTO virtual_clusters (id, team_id, phase, cpu_millis, host_cluster_id)
			VALUES ($1, 't', $2, 1, CASE WHEN $2 IN ('PENDING_APPROVAL', 'REJECTED') THEN NULL ELSE 'default' END)`,
			vcName(p), string(p)); err != nil {
			t.Fatal(err)
		}
	}
}

func vcName(p virtualcluster.Phase) string {
	return "vc-" + strings.ReplaceAll(strings.ToLower(string(p)), "_", "-")
}

func inTx(t *testing.T, db *store.DB, fn func(ctx context.Context, tx *store.Tx) error) {
	t.Helper()
	if err := db.InTx(context.Background(), store.TxOptions{}, fn); err != nil {
		t.Fatal(err)
	}
}

func depth(t *testing.T, db *store.DB) int64 {
	t.Helper()
	st, err := workqueue.Stats(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return st.Depth
}

// Fan-out and resync take exactly the phases that need resyncing.
func TestFanOutAndResyncTakeResyncPhases(t *testing.T) {
	pool := storetest.Pool(t)
	db := store.New(pool)
	seed(t, pool, virtualcluster.Phases()...)
	want := int64(len(virtualcluster.PhasesWhere(virtualcluster.Phase.NeedsResync)))
	inTx(t, db, func(ctx context.Context, tx *store.Tx) error { return workqueue.EnqueueDepartment(ctx, tx, "d") })
	if got := depth(t, db); got != want {
		t.Fatalf("department fan-out queued %d, want %d", got, want)
	}
	inTx(t, db, func(ctx context.Context, tx *store.Tx) error { return workqueue.EnqueueTeam(ctx, tx, "t") })
	if got := depth(t, db); got != want {
		t.Fatalf("team fan-out after department fan-out: %d rows, want %d (rows coalesce)", got, want)
	}
	n, err := workqueue.Resync(context.Background(), db)
	if err != nil || n != 0 {
		t.Fatalf("resync of a full queue queued %d (%v), want 0", n, err)
	}
	if _, err := pool.Exec(context.Background(), `DELETE FROM reconcile_work`); err != nil {
		t.Fatal(err)
	}
	if n, err = workqueue.Resync(context.Background(), db); err != nil || n != want {
		t.Fatalf("resync queued %d (%v), want %d", n, err, want)
	}
}

// Claims are exclusive while leased; Done keeps an item enqueued again
// during the work; Later keeps attempts only for failures; ReleaseAll
// hands leases back.
func TestClaimLeaseFinish(t *testing.T) {
	pool := storetest.Pool(t)
	db := store.New(pool)
	ctx := context.Background()
	seed(t, pool, virtualcluster.PhaseReady, virtualcluster.PhaseProvisioning)
	ready, prov := vcName(virtualcluster.PhaseReady), vcName(virtualcluster.PhaseProvisioning)
	inTx(t, db, func(ctx context.Context, tx *store.Tx) error {
		if err := workqueue.Enqueue(ctx, tx, ready); err != nil {
			return err
		}
		return workqueue.Enqueue(ctx, tx, prov)
	})
	a, err := workqueue.ClaimDue(ctx, db, "a", time.Minute, 1, nil, 0, nil)
	if err != nil || len(a) != 1 || a[0].Attempts != 1 {
		t.Fatalf("worker a claimed %+v (%v)", a, err)
	}
	b, err := workqueue.ClaimDue(ctx, db, "b", time.Minute, 5, nil, 0, nil)
	if err != nil || len(b) != 1 || b[0].VirtualCluster == a[0].VirtualCluster {
		t.Fatalf("worker b claimed %+v (%v) while a holds %s", b, err, a[0].VirtualCluster)
	}
	if more, _ := workqueue.ClaimDue(ctx, db, "c", time.Minute, 5, nil, 0, nil); len(more) != 0 {
		t.Fatalf("leased items claimed again: %+v", more)
	}
	// Enqueued again while a works: Done leaves the row, due, unleased.
	inTx(t, db, func(ctx context.Context, tx *store.Tx) error { return workqueue.Enqueue(ctx, tx, a[0].VirtualCluster) })
	if err := workqueue.Done(ctx, db, a[0]); err != nil {
		t.Fatal(err)
	}
	again, err := workqueue.ClaimDue(ctx, db, "a", time.Minute, 5, nil, 0, nil)
	if err != nil || len(again) != 1 || again[0].VirtualCluster != a[0].VirtualCluster {
		t.Fatalf("re-enqueued item not due again: %+v (%v)", again, err)
	}
	if err := workqueue.Done(ctx, db, again[0]); err != nil {
		t.Fatal(err)
	}
	// A failure keeps its attempts and waits; ReleaseAll gives the attempt back.
	if err := workqueue.Later(ctx, db, b[0], time.Hour, "boom", true); err != nil {
		t.Fatal(err)
	}
	if due, _ := workqueue.ClaimDue(ctx, db, "b", time.Minute, 5, nil, 0, nil); len(due) != 0 {
		t.Fatalf("item put back for an hour is due: %+v", due)
	}
	if _, err := pool.Exec(ctx, `UPDATE reconcile_work SET run_after = now()`); err != nil {
		t.Fatal(err)
	}
	c, err := workqueue.ClaimDue(ctx, db, "b", time.Minute, 5, nil, 0, nil)
	if err != nil || len(c) != 1 || c[0].Attempts != 2 {
		t.Fatalf("retry claimed %+v (%v), want attempt 2", c, err)
	}
	if err := workqueue.ReleaseAll(ctx, db, "b"); err != nil {
		t.Fatal(err)
	}
	st, err := workqueue.Stats(ctx, db)
	if err != nil || st.Depth != 1 || st.Leased != 0 || st.Due != 1 {
		t.Fatalf("after release: %+v (%v)", st, err)
	}
	c, _ = workqueue.ClaimDue(ctx, db, "c", time.Minute, 5, nil, 0, nil)
	if len(c) != 1 || c[0].Attempts != 2 {
		t.Fatalf("after release the attempt is given back: %+v", c)
	}
}

// Work is sharded by host cluster: a claim takes at most perCluster items
// of one host cluster, counts what is in flight there (busy), skips host
// clusters without a free slot, and still serves the others.
func TestClaimShardsByHostCluster(t *testing.T) {
	pool := storetest.Pool(t)
	db := store.New(pool)
	ctx := context.Background()
	seed(t, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO host_clusters (id, kubeconfig_secret, kubeconfig_secret_key, tiers)
		VALUES ('down', 'down-kubeconfig', 'kubeconfig', '{SHARED}')`); err != nil {
		t.Fatal(err)
	}
	// Six on a host cluster that is down, queued first; two on the default one.
	for i, hc := range []string{"down", "down", "down", "down", "down", "down", "default", "default"} {
		id := hc + "-" + string(rune('a'+i))
		if _, err := pool.Exec(ctx, `INSERT INTO virtual_clusters (id, team_id, phase, cpu_millis, host_cluster_id)
			VALUES ($1, 't', 'READY', 1, $2)`, id, hc); err != nil {
			t.Fatal(err)
		}
		inTx(t, db, func(ctx context.Context, tx *store.Tx) error { return workqueue.Enqueue(ctx, tx, id) })
	}
	count := func(claims []workqueue.Claim) map[string]int {
		out := map[string]int{}
		for _, c := range claims {
			out[c.HostCluster]++
			if !strings.HasPrefix(c.VirtualCluster, c.HostCluster+"-") {
				t.Errorf("claim %s reports host cluster %q", c.VirtualCluster, c.HostCluster)
			}
		}
		return out
	}
	first, err := workqueue.ClaimDue(ctx, db, "w", time.Minute, 4, nil, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := count(first); got["down"] != 2 || got["default"] != 2 {
		t.Fatalf("4 slots, 2 per host cluster: claimed %v, want 2 of each although the down cluster's items are older", got)
	}
	// Both host clusters now have 2 in flight: nothing more of either.
	if more, err := workqueue.ClaimDue(ctx, db, "w", time.Minute, 4, nil, 2, map[string]int{"down": 0, "default": 0}); err != nil || len(more) != 0 {
		t.Fatalf("full host clusters: claimed %+v (%v)", more, err)
	}
	// One slot free on the down cluster: exactly one of its items.
	one, err := workqueue.ClaimDue(ctx, db, "w", time.Minute, 4, nil, 2, map[string]int{"down": 1, "default": 0})
	if err != nil || len(one) != 1 || one[0].HostCluster != "down" {
		t.Fatalf("one free slot: claimed %+v (%v)", one, err)
	}
}
