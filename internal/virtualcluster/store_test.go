package virtualcluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// The repository's sums use the phase rules: only quota-holding virtual
// clusters count against their team, gone names are reusable, and status
// (with conditions) round-trips through the table.
func TestRepository(t *testing.T) {
	pool := storetest.Pool(t)
	db := store.New(pool)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO departments (id, admin_groups) VALUES ('d', '{}')`,
		`INSERT INTO teams (id, department_id, isolation_tier) VALUES ('t', 'd', 'SHARED')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	one := quota.Resources{GPU: quota.OneGPU, CPUMillis: 1000}
	run := func(fn func(ctx context.Context, tx *store.Tx) error) error {
		return db.InTx(ctx, store.TxOptions{}, fn)
	}
	for i, p := range virtualcluster.Phases() {
		id := "vc" + string(rune('a'+i))
		if err := run(func(ctx context.Context, tx *store.Tx) error {
			if _, err := virtualcluster.InsertPending(ctx, tx, "t", id, virtualcluster.Spec{Quota: one}); err != nil {
				return err
			}
			if err := virtualcluster.PlaceOn(ctx, tx, id, "default"); err != nil {
				return err
			}
			_, err := virtualcluster.SetPhase(ctx, tx, id, p, "")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	holding := int64(len(virtualcluster.PhasesWhere(virtualcluster.Phase.HoldsQuota)))
	sum, err := virtualcluster.QuotaOfTeam(ctx, db, "t", "")
	if err != nil || sum.CPUMillis != holding*1000 {
		t.Fatalf("team quota sum %+v (%v), want %d phases' worth", sum, err, holding)
	}
	notGone, err := virtualcluster.CountNotGone(ctx, db, "t")
	if err != nil || notGone != len(virtualcluster.Phases())-len(virtualcluster.PhasesWhere(virtualcluster.Phase.IsGone)) {
		t.Fatalf("not gone %d (%v)", notGone, err)
	}
	// "vcf" is DELETED (sixth phase): its name may be used again; a live
	// one's may not.
	if err := run(func(ctx context.Context, tx *store.Tx) error {
		_, err := virtualcluster.InsertPending(ctx, tx, "t", "vcf", virtualcluster.Spec{Quota: one})
		return err
	}); err != nil {
		t.Fatalf("reuse of a deleted name: %v", err)
	}
	err = run(func(ctx context.Context, tx *store.Tx) error {
		_, err := virtualcluster.InsertPending(ctx, tx, "t", "vcc", virtualcluster.Spec{Quota: one})
		return err
	})
	if errs.KindOf(err) != errs.KindAlreadyExists {
		t.Fatalf("reuse of a live name: %v", err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	conds := []virtualcluster.Condition{{Type: "QueuesReady", Status: virtualcluster.ConditionTrue, Reason: "InSync", ObservedGeneration: 3, LastTransitionTime: at}}
	var written virtualcluster.VirtualCluster
	if err := run(func(ctx context.Context, tx *store.Tx) error {
		written, err = virtualcluster.WriteStatus(ctx, tx, "vcc", virtualcluster.Status{Phase: virtualcluster.PhaseReady, Conditions: conds,
			ObservedGeneration: 3, Message: "m", Allocated: one, Endpoint: "https://e"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got, err := virtualcluster.Get(ctx, db, "vcc", false)
	if err != nil || got.Phase != virtualcluster.PhaseReady || got.Endpoint != "https://e" || got.Allocated != one ||
		len(got.Conditions) != 1 || !got.Conditions[0].LastTransitionTime.Equal(at) || got.Version != written.Version {
		t.Fatalf("read back %+v (%v)", got, err)
	}
}

// The SQL rule the held_quota triggers use for "this phase holds quota"
// is Phase.HoldsQuota, for every phase.
func TestHeldQuotaPhaseRuleMatchesGo(t *testing.T) {
	pool := storetest.Pool(t)
	for _, p := range virtualcluster.Phases() {
		var holds bool
		if err := pool.QueryRow(context.Background(), `SELECT vc_phase_holds_quota($1)`, string(p)).Scan(&holds); err != nil {
			t.Fatal(err)
		}
		if holds != p.HoldsQuota() {
			t.Errorf("phase %s: vc_phase_holds_quota says %v, Phase.HoldsQuota %v", p, holds, p.HoldsQuota())
		}
	}
}

// The held_quota rows the triggers keep equal, after every kind of change
// in random order, a full recount of the virtual clusters; and the sums
// read from them (QuotaOfTeam, QuotaOnHostPool, ParentQuotasOnHost, each
// with and without an excluded virtual cluster) equal sums computed here
// from the rows with Go's phase rules.
func TestHeldQuotaStaysExact(t *testing.T) {
	pool := storetest.Pool(t)
	db := store.New(pool)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO host_clusters (id, kubeconfig_secret, kubeconfig_secret_key, tiers) VALUES ('h2', 's', 'k', '{SHARED,DEDICATED}')`)
	for _, d := range []string{"d1", "d2"} {
		exec(`INSERT INTO departments (id, admin_groups) VALUES ($1, '{}')`, d)
	}
	teams := map[string]string{"t1": "d1", "t2": "d1", "t3": "d2"}
	for id, d := range teams {
		exec(`INSERT INTO teams (id, department_id, isolation_tier) VALUES ($1, $2, 'SHARED')`, id, d)
	}
	hosts := []string{"default", "h2"}
	phases := virtualcluster.Phases()
	rnd := rand.New(rand.NewPCG(1, 2))
	teamIDs := []string{"t1", "t2", "t3"}
	var vcs []string
	check := func(step string) {
		t.Helper()
		drift, err := virtualcluster.HeldQuotaDrift(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if len(drift) > 0 {
			t.Fatalf("after %s: held_quota drifted:\n  %s", step, strings.Join(drift, "\n  "))
		}
		type row struct {
			id, team, host, pool, dept string
			phase                      virtualcluster.Phase
			sleep, keeps               bool
			q                          quota.Resources
		}
		rows, err := pool.Query(ctx, `SELECT v.id, v.team_id, COALESCE(v.host_cluster_id, ''), t.node_pool, t.department_id, v.phase,
			v.sleep, d.sleeping_keeps_quota, v.gpu_centi, v.cpu_millis, v.memory_bytes
			FROM virtual_clusters v JOIN teams t ON t.id = v.team_id JOIN departments d ON d.id = t.department_id`)
		if err != nil {
			t.Fatal(err)
		}
		var all []row
		for rows.Next() {
			var r row
			var g int64
			if err := rows.Scan(&r.id, &r.team, &r.host, &r.pool, &r.dept, &r.phase, &r.sleep, &r.keeps, &g, &r.q.CPUMillis, &r.q.MemoryBytes); err != nil {
				t.Fatal(err)
			}
			r.q.GPU = quota.GPU(g)
			all = append(all, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := func(match func(row) bool, exclude string) quota.Resources {
			var s quota.Resources
			for _, r := range all {
				if r.phase.HoldsQuota() && (!r.sleep || r.keeps) && match(r) && !(r.id == exclude && !r.phase.IsGone()) {
					s = s.Add(r.q)
				}
			}
			return s
		}
		excludes := []string{""}
		if len(vcs) > 0 {
			excludes = append(excludes, vcs[rnd.IntN(len(vcs))])
		}
		for _, ex := range excludes {
			for _, team := range teamIDs {
				got, err := virtualcluster.QuotaOfTeam(ctx, db, team, ex)
				if w := want(func(r row) bool { return r.team == team }, ex); err != nil || got != w {
					t.Fatalf("after %s: QuotaOfTeam(%s, except %q) = %+v (%v), want %+v", step, team, ex, got, err, w)
				}
			}
			for _, h := range hosts {
				for _, p := range []string{"shared", "dedicated-t2"} {
					got, err := virtualcluster.QuotaOnHostPool(ctx, db, h, p, ex)
					if w := want(func(r row) bool { return r.host == h && r.pool == p }, ex); err != nil || got != w {
						t.Fatalf("after %s: QuotaOnHostPool(%s, %s, except %q) = %+v (%v), want %+v", step, h, p, ex, got, err, w)
					}
				}
			}
		}
		for _, h := range hosts {
			for team, dept := range teams {
				ts, ds, err := virtualcluster.ParentQuotasOnHost(ctx, db, h, dept, team)
				wt := want(func(r row) bool { return r.host == h && r.team == team }, "")
				wd := want(func(r row) bool { return r.host == h && r.dept == dept }, "")
				if err != nil || ts != wt || ds != wd {
					t.Fatalf("after %s: ParentQuotasOnHost(%s, %s, %s) = %+v, %+v (%v), want %+v, %+v", step, h, dept, team, ts, ds, err, wt, wd)
				}
			}
		}
	}
	check("setup")
	for i := range 400 {
		var step string
		switch op := rnd.IntN(10); {
		case op < 2 || len(vcs) == 0:
			id := fmt.Sprintf("vc%03d", i)
			team := teamIDs[rnd.IntN(len(teamIDs))]
			p := phases[rnd.IntN(len(phases))]
			host := any(hosts[rnd.IntN(len(hosts))])
			if p == virtualcluster.PhasePendingApproval {
				host = nil
			}
			step = fmt.Sprintf("insert %s (%s, %s, %v)", id, team, p, host)
			exec(`INSERT INTO virtual_clusters (id, team_id, phase, host_cluster_id, sleep, gpu_centi, cpu_millis, memory_bytes)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, id, team, p, host, rnd.IntN(3) == 0, rnd.Int64N(300), rnd.Int64N(4000), rnd.Int64N(1<<30))
			vcs = append(vcs, id)
		case op == 2:
			id := vcs[rnd.IntN(len(vcs))]
			p := phases[rnd.IntN(len(phases))]
			if p == virtualcluster.PhasePendingApproval {
				p = virtualcluster.PhaseReady
			}
			step = fmt.Sprintf("phase of %s to %s", id, p)
			exec(`UPDATE virtual_clusters SET phase = $2, host_cluster_id = COALESCE(host_cluster_id, 'default') WHERE id = $1`, id, p)
		case op == 3:
			id := vcs[rnd.IntN(len(vcs))]
			step = "sleep flip of " + id
			exec(`UPDATE virtual_clusters SET sleep = NOT sleep WHERE id = $1`, id)
		case op == 4:
			id := vcs[rnd.IntN(len(vcs))]
			step = "quota change of " + id
			exec(`UPDATE virtual_clusters SET gpu_centi = $2, cpu_millis = $3 WHERE id = $1`, id, rnd.Int64N(300), rnd.Int64N(4000))
		case op == 5:
			id := vcs[rnd.IntN(len(vcs))]
			step = "move of " + id
			exec(`UPDATE virtual_clusters SET host_cluster_id = $2 WHERE id = $1 AND host_cluster_id IS NOT NULL`, id, hosts[rnd.IntN(len(hosts))])
		case op == 6:
			d := []string{"d1", "d2"}[rnd.IntN(2)]
			step = "sleeping_keeps_quota flip of " + d
			exec(`UPDATE departments SET sleeping_keeps_quota = NOT sleeping_keeps_quota WHERE id = $1`, d)
		case op == 7:
			step = "node pool change of t2"
			exec(`UPDATE teams SET isolation_tier = CASE isolation_tier WHEN 'SHARED' THEN 'DEDICATED' ELSE 'SHARED' END,
				node_pool = CASE node_pool WHEN 'shared' THEN 'dedicated-t2' ELSE 'shared' END WHERE id = 't2'`)
		case op == 8:
			id := vcs[rnd.IntN(len(vcs))]
			step = "status write of " + id
			exec(`UPDATE virtual_clusters SET status_message = 'x', alloc_cpu_millis = alloc_cpu_millis + 1 WHERE id = $1`, id)
		default:
			idx := rnd.IntN(len(vcs))
			step = "delete of " + vcs[idx]
			exec(`DELETE FROM virtual_clusters WHERE id = $1`, vcs[idx])
			vcs = append(vcs[:idx], vcs[idx+1:]...)
		}
		check(step)
	}
}
