package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

func TestMain(m *testing.M) { storetest.Main(m) }

var alice = reqctx.Principal{Subject: "sub-alice", Username: "alice"}

type fixture struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	db   *store.DB
	svc  *fleet.Service
}

// newFixture: department d with a SHARED team s and a DEDICATED team x
// (pool dedicated-x); host cluster "default" from the migration.
func newFixture(t *testing.T, observed bool) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	pool := storetest.Pool(t)
	f := &fixture{t: t, ctx: ctx, pool: pool, db: store.New(pool), svc: fleet.NewService(1, observed)}
	for _, sql := range []string{
		`INSERT INTO departments (id, admin_groups) VALUES ('d', '{}')`,
		`INSERT INTO teams (id, department_id, isolation_tier, node_pool) VALUES ('s', 'd', 'SHARED', 'shared')`,
		`INSERT INTO teams (id, department_id, isolation_tier, node_pool) VALUES ('x', 'd', 'DEDICATED', 'dedicated-x')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) tx(fn func(ctx context.Context, tx *store.Tx) error) error {
	return f.db.InTx(f.ctx, store.TxOptions{}, fn)
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) create(h fleet.HostCluster) (fleet.HostCluster, error) {
	var out fleet.HostCluster
	err := f.tx(func(ctx context.Context, tx *store.Tx) error {
		var err error
		out, err = f.svc.Create(ctx, tx, alice, "", h)
		return err
	})
	return out, err
}

// placed stores a virtual cluster of team on a host cluster, holding q.
func (f *fixture) placed(team, id, hostCluster string, q quota.Resources, phase virtualcluster.Phase) {
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		if _, err := virtualcluster.InsertPending(ctx, tx, team, id, virtualcluster.Spec{Quota: q}); err != nil {
			return err
		}
		if err := virtualcluster.PlaceOn(ctx, tx, id, hostCluster); err != nil {
			return err
		}
		_, err := virtualcluster.SetPhase(ctx, tx, id, phase, "")
		return err
	}))
}

func (f *fixture) observe(id string, o fleet.Observation) fleet.ObservationResult {
	var res fleet.ObservationResult
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		var err error
		res, err = fleet.RecordObservation(ctx, tx, id, o)
		return err
	}))
	return res
}

func wantErr(t *testing.T, err error, kind errs.Kind, reason string, fragments ...string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Kind != kind || e.Reason != reason {
		t.Fatalf("got %v, want %v %s", err, kind, reason)
	}
	for _, fr := range fragments {
		if !strings.Contains(e.PublicMessage(), fr) {
			t.Errorf("message %q does not contain %q", e.PublicMessage(), fr)
		}
	}
}

func gpus(n int64, cpu int64) quota.Resources {
	return quota.Resources{GPU: quota.GPUs(n), CPUMillis: cpu * 1000, MemoryBytes: cpu << 30}
}

func pools(p ...fleet.PoolStatus) []fleet.PoolStatus { return p }

// Host clusters are validated, unique, change only with a current etag,
// and cannot be deleted, or lose a tier, while they host virtual clusters.
func TestHostClusterLifecycle(t *testing.T) {
	f := newFixture(t, true)
	def, err := fleet.Get(f.ctx, f.db, fleet.DefaultHostCluster, false)
	if err != nil || !def.Connection.InCluster || !def.Takes("SHARED") || !def.Takes("DEDICATED") {
		t.Fatalf("migration's default host cluster: %+v (%v)", def, err)
	}
	if v := fleet.Validate(fleet.HostCluster{Connection: fleet.Connection{Secret: "Bad_Name"}, Tiers: []string{"GOLD"},
		Labels: map[string]string{"GPU_Model": "h100"}}, "host_cluster"); len(v) != 3 {
		t.Fatalf("validation found %v, want the secret name, the tier and the label key", v)
	}
	east, err := f.create(fleet.HostCluster{ID: "east", Connection: fleet.Connection{Secret: "east-kubeconfig"}, Tiers: []string{"SHARED"},
		Labels: map[string]string{"region": "us-east"}})
	if err != nil || east.Connection.Key != fleet.DefaultKubeconfigKey {
		t.Fatalf("create east: %+v (%v)", east, err)
	}
	_, err = f.create(fleet.HostCluster{ID: "east", Connection: fleet.Connection{Secret: "x"}, Tiers: []string{"SHARED"}})
	wantErr(t, err, errs.KindAlreadyExists, errs.ReasonAlreadyExists)
	_, err = f.create(fleet.HostCluster{ID: "other", Connection: fleet.Connection{InCluster: true}, Tiers: []string{"SHARED"}})
	wantErr(t, err, errs.KindFailedPrecondition, errs.ReasonAlreadyExists, "only one can be the cluster gpuplane runs in")

	// Stale etag; then a label change with the current one.
	update := func(etag string, change func(*fleet.HostCluster)) (fleet.HostCluster, error) {
		var out fleet.HostCluster
		err := f.tx(func(ctx context.Context, tx *store.Tx) error {
			var err error
			out, err = f.svc.Update(ctx, tx, alice, "east", etag, change)
			return err
		})
		return out, err
	}
	_, err = update(`"0-0"`, func(h *fleet.HostCluster) { h.Cordoned = true })
	wantErr(t, err, errs.KindAborted, errs.ReasonEtagMismatch)
	east, err = update(east.Etag(), func(h *fleet.HostCluster) { h.Labels["gpu-model"] = "h100" })
	if err != nil || east.Labels["gpu-model"] != "h100" || east.Labels["region"] != "us-east" {
		t.Fatalf("label update: %+v (%v)", east, err)
	}

	// An observation does not move the etag.
	etag := east.Etag()
	f.observe("east", fleet.Observation{Reachable: true, KubernetesVersion: "v1.37.2", KAIQueueAPI: true,
		Pools: pools(fleet.PoolStatus{Name: "shared", Nodes: 1, Capacity: gpus(8, 96)})})
	east, _ = fleet.Get(f.ctx, f.db, "east", false)
	if east.Etag() != etag || !east.Status.Reachable || east.Status.KubernetesVersion != "v1.37.2" {
		t.Fatalf("after observation: etag %s (was %s), status %+v", east.Etag(), etag, east.Status)
	}

	f.placed("s", "vc-a", "east", gpus(1, 1), virtualcluster.PhaseReady)
	f.placed("s", "vc-b", "east", gpus(1, 1), virtualcluster.PhaseDeleting)
	_, err = update(east.Etag(), func(h *fleet.HostCluster) { h.Tiers = []string{"DEDICATED"} })
	wantErr(t, err, errs.KindFailedPrecondition, errs.ReasonHasChildren, "still hosts SHARED virtual clusters", "teams/s/virtualClusters/vc-a")
	del := func() error {
		return f.tx(func(ctx context.Context, tx *store.Tx) error { return f.svc.Delete(ctx, tx, alice, "east", "") })
	}
	wantErr(t, del(), errs.KindFailedPrecondition, errs.ReasonHasChildren,
		"hostClusters/east still hosts 2 virtual cluster(s): teams/s/virtualClusters/vc-a, teams/s/virtualClusters/vc-b")
	// A pending request naming it counts too.
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := virtualcluster.InsertPending(ctx, tx, "s", "vc-c", virtualcluster.Spec{Quota: gpus(1, 1),
			Placement: virtualcluster.Placement{HostCluster: "east"}})
		return err
	}))
	for _, id := range []string{"vc-a", "vc-b"} {
		f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
			_, err := virtualcluster.MarkDeleted(ctx, tx, id)
			return err
		}))
	}
	wantErr(t, del(), errs.KindFailedPrecondition, errs.ReasonHasChildren, "teams/s/virtualClusters/vc-c")
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, _, err := virtualcluster.RejectPending(ctx, tx, "vc-c", "no")
		return err
	}))
	if err := del(); err != nil {
		t.Fatalf("delete once nothing runs there: %v", err)
	}
	if _, err := fleet.Get(f.ctx, f.db, "east", false); errs.KindOf(err) != errs.KindNotFound {
		t.Fatalf("deleted host cluster: %v", err)
	}
	var actions []string
	rows, err := f.pool.Query(f.ctx, `SELECT action FROM audit_events WHERE resource = 'hostClusters/east' ORDER BY id`)
	f.must(err)
	for rows.Next() {
		var a string
		f.must(rows.Scan(&a))
		actions = append(actions, a)
	}
	if got := strings.Join(actions, ","); got != "CreateHostCluster,UpdateHostCluster,HostClusterReachable,DeleteHostCluster" {
		t.Errorf("audit trail %s", got)
	}
}

// The placement rule: candidates take the tier, carry the labels, are the
// one named, are not cordoned and are reachable; of those with room in
// the team's pool, the one left with the most free GPUs wins.
func TestPlacementRule(t *testing.T) {
	f := newFixture(t, true)
	for _, h := range []fleet.HostCluster{
		{ID: "east", Connection: fleet.Connection{Secret: "e"}, Tiers: []string{"SHARED"}, Labels: map[string]string{"region": "us", "gpu-model": "h100"}},
		{ID: "west", Connection: fleet.Connection{Secret: "w"}, Tiers: []string{"SHARED", "DEDICATED"}, Labels: map[string]string{"region": "us", "gpu-model": "a100"}},
		{ID: "dark", Connection: fleet.Connection{Secret: "k"}, Tiers: []string{"SHARED"}, Labels: map[string]string{"region": "us"}},
	} {
		if _, err := f.create(h); err != nil {
			t.Fatal(err)
		}
	}
	f.observe("default", fleet.Observation{Reachable: true, Pools: pools(fleet.PoolStatus{Name: "shared", Nodes: 1, Capacity: gpus(2, 32)})})
	f.observe("east", fleet.Observation{Reachable: true, Pools: pools(fleet.PoolStatus{Name: "shared", Nodes: 2, Capacity: gpus(8, 64)})})
	f.observe("west", fleet.Observation{Reachable: true, Pools: pools(fleet.PoolStatus{Name: "shared", Nodes: 1, Capacity: gpus(6, 64)},
		fleet.PoolStatus{Name: "dedicated-x", Nodes: 1, Capacity: gpus(4, 32)})})
	f.observe("dark", fleet.Observation{Reachable: false, Problem: "dial tcp: connection refused"})

	place := func(n fleet.Need) (fleet.Decision, error) {
		var d fleet.Decision
		err := f.tx(func(ctx context.Context, tx *store.Tx) error {
			var err error
			d, err = f.svc.Place(ctx, tx, n)
			return err
		})
		return d, err
	}
	shared := func(g int64, p virtualcluster.Placement) fleet.Need {
		return fleet.Need{VirtualCluster: "new", Tier: "SHARED", Pool: "shared", Quota: gpus(g, 1), Placement: p}
	}
	// Most GPUs left free: east (8) over west (6) over default (2); dark is down.
	d, err := place(shared(2, virtualcluster.Placement{}))
	if err != nil || d.HostCluster != "east" || d.Node == nil || d.Node.Name != "hostClusters/east/nodePools/shared" {
		t.Fatalf("unconstrained: %+v (%v)", d, err)
	}
	// East fills up: 5 of 8 taken, so west (6 free) wins a 2-GPU request.
	f.placed("s", "big", "east", gpus(5, 1), virtualcluster.PhaseReady)
	if d, err = place(shared(2, virtualcluster.Placement{})); err != nil || d.HostCluster != "west" {
		t.Fatalf("after east filled: %+v (%v)", d, err)
	}
	// Labels and names constrain; a cordoned cluster is skipped.
	if d, err = place(shared(1, virtualcluster.Placement{Labels: map[string]string{"gpu-model": "h100"}})); err != nil || d.HostCluster != "east" {
		t.Fatalf("gpu-model=h100: %+v (%v)", d, err)
	}
	if d, err = place(shared(1, virtualcluster.Placement{HostCluster: "default"})); err != nil || d.HostCluster != "default" {
		t.Fatalf("named default: %+v (%v)", d, err)
	}
	// DEDICATED goes where its pool is and the tier is taken.
	if d, err = place(fleet.Need{VirtualCluster: "new", Tier: "DEDICATED", Pool: "dedicated-x", Quota: gpus(4, 1)}); err != nil || d.HostCluster != "west" {
		t.Fatalf("dedicated: %+v (%v)", d, err)
	}
	// No room anywhere: every candidate's shortfall, no host cluster.
	d, err = place(shared(7, virtualcluster.Placement{}))
	if err != nil || d.Fits() || len(d.Shortfalls) != 3 || len(d.Candidates) != 3 {
		t.Fatalf("no room: %+v (%v)", d, err)
	}
	for _, sf := range d.Shortfalls {
		if sf.Level != fleet.LevelHostCluster || !strings.HasSuffix(sf.Name, "/nodePools/shared") {
			t.Errorf("shortfall %+v", sf)
		}
	}
	// Nothing can take it at all: each cluster says why.
	_, err = place(shared(1, virtualcluster.Placement{Labels: map[string]string{"region": "us"}, HostCluster: "dark"}))
	wantErr(t, err, errs.KindFailedPrecondition, fleet.ReasonNoHostCluster, "hostClusters/dark: unreachable since", "connection refused")
	_, err = place(fleet.Need{Tier: "DEDICATED", Pool: "dedicated-x", Quota: gpus(1, 1), Placement: virtualcluster.Placement{Labels: map[string]string{"gpu-model": "h100"}}})
	wantErr(t, err, errs.KindFailedPrecondition, fleet.ReasonNoHostCluster, "hostClusters/east: does not take tier DEDICATED", "hostClusters/west: lacks label gpu-model=h100")
	_, err = place(shared(1, virtualcluster.Placement{HostCluster: "nowhere"}))
	wantErr(t, err, errs.KindFailedPrecondition, fleet.ReasonNoHostCluster, "hostClusters/nowhere does not exist")

	// Request validation before anything is stored.
	var v errs.Violations
	f.must(fleet.CheckPlacement(f.ctx, f.db, &v, "p", "DEDICATED", virtualcluster.Placement{HostCluster: "east"}))
	f.must(fleet.CheckPlacement(f.ctx, f.db, &v, "p", "SHARED", virtualcluster.Placement{Labels: map[string]string{"region": "mars"}}))
	if len(v) != 2 || !strings.Contains(v[0].Description, "does not take DEDICATED") || !strings.Contains(v[1].Description, "no host cluster taking SHARED virtual clusters carries these labels") {
		t.Fatalf("placement violations %+v", v)
	}

	// Platform-wide capacity sums the fleet's pools.
	total, err := fleet.ObservedCapacity{DB: f.db}.PoolCapacity(f.ctx)
	if err != nil || total["shared"].GPU != quota.GPUs(16) || total["dedicated-x"].GPU != quota.GPUs(4) {
		t.Fatalf("observed capacity %+v (%v)", total, err)
	}
}

// Without observed capacity (static capacity from configuration)
// placement matches tiers and labels only, and the lowest id wins.
func TestPlacementWithoutObservedCapacity(t *testing.T) {
	f := newFixture(t, false)
	if _, err := f.create(fleet.HostCluster{ID: "alpha", Connection: fleet.Connection{Secret: "a"}, Tiers: []string{"SHARED"}}); err != nil {
		t.Fatal(err)
	}
	var d fleet.Decision
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		var err error
		d, err = f.svc.Place(ctx, tx, fleet.Need{Tier: "SHARED", Pool: "shared", Quota: gpus(100, 1)})
		return err
	}))
	if d.HostCluster != "alpha" || d.Node != nil {
		t.Fatalf("static capacity placement %+v", d)
	}
}

// Observations: reachability flips are audited and re-queue the host
// cluster's live virtual clusters (the READY one, not the FAILED one); an unreachable cluster keeps what was seen
// before and says since when it is down.
func TestRecordObservation(t *testing.T) {
	f := newFixture(t, true)
	f.placed("s", "vc-a", "default", gpus(1, 1), virtualcluster.PhaseReady)
	f.placed("s", "vc-b", "default", gpus(1, 1), virtualcluster.PhaseFailed)
	queued := func() int {
		var n int
		f.must(f.pool.QueryRow(f.ctx, `SELECT count(*) FROM reconcile_work`).Scan(&n))
		return n
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	up := fleet.Observation{Reachable: true, KubernetesVersion: "v1.37.2", KAIVersion: "v0.10.1", KAIQueueAPI: true,
		Pools: pools(fleet.PoolStatus{Name: "shared", Nodes: 2, Capacity: gpus(16, 192)}), At: at}
	// The first look changes nothing the virtual clusters were converged
	// against: nothing is queued.
	res := f.observe("default", up)
	if !res.BecameReachable || res.Requeued != 0 || queued() != 0 {
		t.Fatalf("first observation %+v, queued %d (want none)", res, queued())
	}
	up.At = at.Add(time.Minute)
	if res = f.observe("default", up); res.BecameReachable || res.PoolsChanged || res.Requeued != 0 {
		t.Fatalf("nothing changed: %+v", res)
	}
	if _, err := f.pool.Exec(f.ctx, `DELETE FROM reconcile_work`); err != nil {
		t.Fatal(err)
	}
	down := fleet.Observation{Reachable: false, Problem: "connection refused", At: at.Add(2 * time.Minute)}
	res = f.observe("default", down)
	h := res.HostCluster
	if !res.BecameUnreachable || queued() != 1 || h.Status.Reachable || h.Status.KAIVersion != "v0.10.1" ||
		h.Status.UnreachableSince == nil || !h.Status.UnreachableSince.Equal(down.At) || h.PoolCapacity("shared").GPU != quota.GPUs(16) {
		t.Fatalf("down: %+v, status %+v", res, h.Status)
	}
	down.At = at.Add(3 * time.Minute)
	if h = f.observe("default", down).HostCluster; !h.Status.UnreachableSince.Equal(at.Add(2 * time.Minute)) {
		t.Fatalf("the outage began at the first failed probe, got %v", h.Status.UnreachableSince)
	}
	var reachable, unreachable int
	f.must(f.pool.QueryRow(f.ctx, `SELECT count(*) FILTER (WHERE action = 'HostClusterReachable'), count(*) FILTER (WHERE action = 'HostClusterUnreachable')
		FROM audit_events WHERE resource = 'hostClusters/default'`).Scan(&reachable, &unreachable))
	if reachable != 1 || unreachable != 1 {
		t.Fatalf("audited %d reachable, %d unreachable events; want one each", reachable, unreachable)
	}
}
