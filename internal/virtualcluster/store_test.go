package virtualcluster_test

import (
	"context"
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
