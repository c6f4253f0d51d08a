package request_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

func TestMain(m *testing.M) { storetest.Main(m) }

var (
	alice = reqctx.Principal{Subject: "sub-alice", Username: "alice"}
	bob   = reqctx.Principal{Subject: "sub-bob", Username: "bob"}
)

type fixture struct {
	t    *testing.T
	ctx  context.Context
	db   *store.DB
	svc  *request.Service
	now  time.Time
	team tenancy.Team
}

// newFixture: department research (8 GPUs) with team-a (4 GPUs).
func newFixture(t *testing.T) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, db: store.New(storetest.Pool(t)), now: time.Now()}
	versions, err := vclusterversions.NewCatalog("0.36.1", []string{"0.36.1", "0.20.0"}, "")
	if err != nil {
		t.Fatal(err)
	}
	ten := tenancy.NewService(tenancy.StaticCapacity{GPU: quota.GPUs(16)}, 1, request.TeamHistory{})
	f.svc = request.NewService(f.db, ten, fleet.NewService(1, false), versions, nil, func() time.Time { return f.now })
	f.must(f.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		if _, err := ten.CreateDepartment(ctx, tx, alice, "", tenancy.Department{ID: "research", Budget: quota.Resources{GPU: quota.GPUs(8)}}); err != nil {
			return err
		}
		var err error
		f.team, err = ten.CreateTeam(ctx, tx, alice, "", tenancy.Team{ID: "team-a", Department: "research", Tier: tenancy.TierShared,
			Quota: quota.Resources{GPU: quota.GPUs(4)}})
		return err
	}))
	return f
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) create(p request.Payload) (request.Request, error) {
	var r request.Request
	err := f.db.InTx(f.ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		var err error
		r, err = f.svc.Create(ctx, tx, bob, "", f.team, "test", p)
		return err
	})
	return r, err
}

func (f *fixture) approve(r request.Request) (request.Request, error) {
	return f.svc.Decide(f.ctx, r, "", true, func(ctx context.Context, tx *store.Tx, r *request.Request) error {
		return f.svc.Approve(ctx, tx, r, alice, true, "ok")
	})
}

func createVC(id string, gpu int64, expire *time.Time) request.Payload {
	spec := virtualcluster.Spec{Quota: quota.Resources{GPU: quota.GPUs(gpu)}, OverQuotaWeight: 1, Priority: 100, ExpireTime: expire}
	return request.Payload{Create: &request.CreatePayload{VirtualClusterID: id, Spec: spec, VirtualCluster: "teams/team-a/virtualClusters/" + id}}
}

// Create -> approve: the virtual cluster is provisioning at generation 1,
// work is queued in the same transaction, and a second approval is refused.
func TestCreateApproveQueuesWork(t *testing.T) {
	f := newFixture(t)
	r, err := f.create(createVC("ml", 2, nil))
	f.must(err)
	if r.State != request.StatePending {
		t.Fatalf("state %s", r.State)
	}
	vc, err := virtualcluster.Get(f.ctx, f.db, "ml", false)
	f.must(err)
	if vc.Phase != virtualcluster.PhasePendingApproval {
		t.Fatalf("phase %s", vc.Phase)
	}
	if _, err := f.create(createVC("ml", 1, nil)); errs.KindOf(err) != errs.KindAlreadyExists {
		t.Fatalf("second create of the same name: %v", err)
	}
	r, err = f.approve(r)
	f.must(err)
	vc, err = virtualcluster.Get(f.ctx, f.db, "ml", false)
	f.must(err)
	if vc.Phase != virtualcluster.PhaseProvisioning {
		t.Fatalf("phase %s after approval", vc.Phase)
	}
	if r.State != request.StateApproved || r.TargetGeneration == nil || *r.TargetGeneration != vc.Generation || r.Decider != alice.Subject {
		t.Fatalf("approved request %+v (virtual cluster at generation %d)", r, vc.Generation)
	}
	st, err := workqueue.Stats(f.ctx, f.db)
	f.must(err)
	if st.Depth != 1 {
		t.Fatalf("queue depth %d, want 1", st.Depth)
	}
	if _, err := f.approve(r); errs.KindOf(err) != errs.KindFailedPrecondition {
		t.Fatalf("second approval: %v", err)
	}
	// The worker reports the generation applied: the request is APPLIED.
	f.must(f.db.InTx(f.ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		return request.Settle(ctx, tx, reqctx.System("worker"), "ml", "research", "team-a", vc.Generation, request.StateApplied, "")
	}))
	if r, err = request.Get(f.ctx, f.db, r.ID, false); err != nil || r.State != request.StateApplied {
		t.Fatalf("after settle: %s %v", r.State, err)
	}
}

// A request that does not fit its team is refused at approval with the
// level, resource and what is free; the team quota change that makes room
// takes effect with its approval (APPLIED at once).
func TestFitAndTeamQuota(t *testing.T) {
	f := newFixture(t)
	r, err := f.create(createVC("big", 5, nil))
	f.must(err)
	_, err = f.approve(r)
	if e, ok := errs.As(err); !ok || e.Kind != errs.KindFailedPrecondition || e.Reason != errs.ReasonQuotaExceeded || e.Metadata["free"] != "4 GPU" {
		t.Fatalf("approval of 5 GPUs in a 4-GPU team: %v", err)
	}
	fit, err := f.svc.CheckFit(f.ctx, f.team, r.Payload, "big")
	f.must(err)
	if fit.Fits() || len(fit.Shortfalls) != 1 {
		t.Fatalf("fit %+v", fit)
	}
	tq, err := f.create(request.Payload{ChangeTeamQuota: &request.ChangeTeamQuotaPayload{Quota: quota.Resources{GPU: quota.GPUs(6)}}})
	f.must(err)
	tq, err = f.approve(tq)
	f.must(err)
	if tq.State != request.StateApplied {
		t.Fatalf("team quota change is %s, want APPLIED", tq.State)
	}
	if b, err := tenancy.Budget(f.ctx, f.db, "research", false); err != nil || b.GPU != quota.GPUs(8) {
		t.Fatalf("budget %v %v", b, err)
	}
	if _, err := f.approve(r); err != nil {
		t.Fatalf("approval after the team grew: %v", err)
	}
}

// An enabled policy that matches approves at creation; expiry turns a live
// virtual cluster past its expire_time into an approved delete.
func TestAutoApprovalAndExpiry(t *testing.T) {
	f := newFixture(t)
	f.must(f.db.InTx(f.ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		_, err := request.CreatePolicy(ctx, tx, alice, "", request.Policy{ID: "small", Expression: "request.gpu_delta <= 1.0"})
		return err
	}))
	expire := f.now.Add(time.Hour)
	r, err := f.create(createVC("nb", 1, &expire))
	f.must(err)
	if r.State != request.StateApproved || r.ApprovalPolicy == nil || *r.ApprovalPolicy != "small" {
		t.Fatalf("auto-approval: %s policy %v", r.State, r.ApprovalPolicy)
	}
	n, err := f.svc.ExpireVirtualClusters(f.ctx)
	f.must(err)
	if n != 0 {
		t.Fatalf("%d expired before expire_time", n)
	}
	f.now = expire.Add(time.Second)
	n, err = f.svc.ExpireVirtualClusters(f.ctx)
	f.must(err)
	if n != 1 {
		t.Fatalf("%d expired, want 1", n)
	}
	vc, err := virtualcluster.Get(f.ctx, f.db, "nb", false)
	f.must(err)
	if vc.Phase != virtualcluster.PhaseDeleting {
		t.Fatalf("phase %s after expiry", vc.Phase)
	}
	if n, err = f.svc.ExpireVirtualClusters(f.ctx); err != nil || n != 0 {
		t.Fatalf("second sweep: %d %v", n, err)
	}
}

// Rejecting a create marks its virtual cluster REJECTED; cancelling is the
// requester's and only while pending.
func TestRejectAndCancel(t *testing.T) {
	f := newFixture(t)
	r, err := f.create(createVC("x", 1, nil))
	f.must(err)
	r, err = f.svc.Decide(f.ctx, r, "", false, func(ctx context.Context, tx *store.Tx, r *request.Request) error {
		return f.svc.Reject(ctx, tx, r, alice, true, "no")
	})
	f.must(err)
	if vc, _ := virtualcluster.Get(f.ctx, f.db, "x", false); r.State != request.StateRejected || vc.Phase != virtualcluster.PhaseRejected {
		t.Fatalf("after reject: %s, virtual cluster %s", r.State, vc.Phase)
	}
	_, err = f.svc.Decide(f.ctx, r, "", false, func(ctx context.Context, tx *store.Tx, r *request.Request) error {
		return f.svc.Cancel(ctx, tx, r, bob)
	})
	if e, ok := errs.As(err); !ok || e.Reason != errs.ReasonInvalidTransition {
		t.Fatalf("cancel after reject: %v", err)
	}
	// A stale etag is refused before anything changes.
	r2, err := f.create(createVC("x", 1, nil)) // the rejected name is free again
	f.must(err)
	_, err = f.svc.Decide(f.ctx, r2, "stale", false, func(context.Context, *store.Tx, *request.Request) error { return nil })
	if errs.KindOf(err) != errs.KindAborted {
		t.Fatalf("stale etag: %v", err)
	}
}

// lineUpApprovals approves each request as alice, all in one batch of
// their department's changes, and returns each approval's error.
func (f *fixture) lineUpApprovals(rs ...request.Request) []error {
	f.t.Helper()
	calls := make([]func() error, len(rs))
	for i, r := range rs {
		calls[i] = func() error {
			_, err := f.approve(r)
			return err
		}
	}
	return storetest.LineUp(f.t, f.ctx, f.db, tenancy.DepartmentGroup("research"), nil, calls...)
}

// checkHeld: the team holds gpu GPUs, and the held-quota totals agree with
// a recount of its virtual clusters.
func (f *fixture) checkHeld(gpu int64) {
	f.t.Helper()
	held, err := virtualcluster.QuotaOfTeam(f.ctx, f.db, "team-a", "")
	f.must(err)
	if held.GPU != quota.GPUs(gpu) {
		f.t.Errorf("team-a holds %s, want %d GPUs", held.GPU, gpu)
	}
	drift, err := virtualcluster.HeldQuotaDrift(f.ctx, f.db)
	f.must(err)
	if len(drift) > 0 {
		f.t.Errorf("held quota drifted: %v", drift)
	}
}

// Approvals of new virtual clusters that meet in one batch are read ahead
// together, in one round trip (then one for their writes, one for
// COMMIT), and each still takes its quota in turn: of six 1-GPU virtual
// clusters in a 4-GPU team the first four are approved and the last two
// refused with nothing free, as they would be one after the other.
func TestApprovalsInOneBatchTakeQuotaInTurn(t *testing.T) {
	f := newFixture(t)
	var pending []request.Request
	for i := range 6 {
		r, err := f.create(createVC(fmt.Sprintf("b%d", i), 1, nil))
		f.must(err)
		pending = append(pending, r)
	}
	before := f.db.GroupStats()
	for i, err := range f.lineUpApprovals(pending...) {
		if i < 4 {
			if err != nil {
				t.Errorf("approval %d: %v", i, err)
			}
			continue
		}
		if e, ok := errs.As(err); !ok || e.Kind != errs.KindFailedPrecondition || e.Reason != errs.ReasonQuotaExceeded || e.Metadata["free"] != "0 GPU" {
			t.Errorf("approval %d beyond the team's quota: %v", i, err)
		}
	}
	// The batch holding them open sent nothing.
	got := f.db.GroupStats()
	if d := (store.GroupStats{Batches: got.Batches - before.Batches, Members: got.Members - before.Members, RoundTrips: got.RoundTrips - before.RoundTrips}); d != (store.GroupStats{Batches: 2, Members: 7, RoundTrips: 3}) {
		t.Errorf("the approvals' batches: %+v, want the six in one batch of 3 round trips", d)
	}
	for i, r := range pending {
		vc, err := virtualcluster.Get(f.ctx, f.db, r.VirtualClusterID(), false)
		f.must(err)
		want := virtualcluster.PhaseProvisioning
		if i >= 4 {
			want = virtualcluster.PhasePendingApproval
		}
		if vc.Phase != want {
			t.Errorf("virtual cluster %s is %s, want %s", vc.ID, vc.Phase, want)
		}
	}
	f.checkHeld(4)
}

// Two approvals of one request in one batch: the first approves it, the
// second finds it approved and is refused, as one after the other would
// be; another request's approval in the same batch is not disturbed.
func TestApprovalsOfOneRequestInOneBatch(t *testing.T) {
	f := newFixture(t)
	r0, err := f.create(createVC("twice", 1, nil))
	f.must(err)
	r1, err := f.create(createVC("once", 1, nil))
	f.must(err)
	results := f.lineUpApprovals(r0, r0, r1)
	if results[0] != nil || results[2] != nil {
		t.Fatalf("approvals: %v", results)
	}
	if e, ok := errs.As(results[1]); !ok || e.Kind != errs.KindFailedPrecondition || e.Reason != errs.ReasonInvalidTransition {
		t.Errorf("second approval of %s: %v, want an invalid transition", r0.Name(), results[1])
	}
	for _, r := range []request.Request{r0, r1} {
		got, err := request.Get(f.ctx, f.db, r.ID, false)
		f.must(err)
		if got.State != request.StateApproved || got.Version != r.Version+1 {
			t.Errorf("%s: %s at version %d, want APPROVED at %d (approved once)", r.Name(), got.State, got.Version, r.Version+1)
		}
	}
	f.checkHeld(2)
}

// Request creates that meet in one batch read the department and the
// approval policies once (request.Creates) and behave as one after the
// other: a matching policy approves each that fits, in turn (two 2-GPU
// virtual clusters fill the 4-GPU team, the third stays pending), and a
// second request for the same virtual cluster name is refused.
func TestRequestCreatesInOneBatch(t *testing.T) {
	f := newFixture(t)
	f.must(f.db.InTx(f.ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		_, err := request.CreatePolicy(ctx, tx, alice, "", request.Policy{ID: "small", Expression: "request.gpu_delta <= 2.0"})
		return err
	}))
	created := make([]request.Request, 4)
	create := func(i int, vc string) func() error {
		c := request.NewCreateAhead("research")
		return func() error {
			return f.db.InGroupTxPrefetched(f.ctx, tenancy.DepartmentGroup("research"), request.Creates, c, func(ctx context.Context, tx *store.Tx) error {
				var err error
				created[i], err = f.svc.CreateAhead(ctx, tx, bob, "", f.team, "test", createVC(vc, 2, nil), c)
				return err
			})
		}
	}
	results := storetest.LineUp(t, f.ctx, f.db, tenancy.DepartmentGroup("research"), nil,
		create(0, "one"), create(1, "two"), create(2, "one"), create(3, "three"))
	if results[0] != nil || results[1] != nil || results[3] != nil {
		t.Fatalf("creates: %v", results)
	}
	if errs.KindOf(results[2]) != errs.KindAlreadyExists {
		t.Errorf("second request for virtual cluster one: %v, want already exists", results[2])
	}
	for i, want := range map[int]request.State{0: request.StateApproved, 1: request.StateApproved, 3: request.StatePending} {
		got, err := request.Get(f.ctx, f.db, created[i].ID, false)
		f.must(err)
		if got.State != want {
			t.Errorf("request %d (%s) is %s, want %s", i, created[i].VirtualClusterID(), got.State, want)
		}
	}
	f.checkHeld(4)
}
