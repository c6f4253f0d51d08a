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
	// The four approved wrote together: each of their writes once, for all
	// four (store.SetWrite), with COMMIT.
	if d := got.Since(before); d != (store.GroupStats{Batches: 2, Members: 7, RoundTrips: 2, SetFlushes: 1}) {
		t.Errorf("the approvals' batches: %+v, want the six in one batch of 2 round trips (the reads; the writes with COMMIT), its writes as set writes", d)
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

// An approval in a batch whose request is not there (deleted meanwhile,
// say) reads for itself and gets the not-found it would get alone; the
// approvals beside it, read ahead in the same statements, are approved.
func TestApprovalsInOneBatchBesideAMissingRequest(t *testing.T) {
	f := newFixture(t)
	r0, err := f.create(createVC("first", 1, nil))
	f.must(err)
	r1, err := f.create(createVC("last", 1, nil))
	f.must(err)
	gone := r1
	gone.ID = "rmissing"
	results := f.lineUpApprovals(r0, gone, r1)
	if results[0] != nil || results[2] != nil {
		t.Fatalf("approvals beside the missing request: %v", results)
	}
	if errs.KindOf(results[1]) != errs.KindNotFound {
		t.Errorf("approval of a missing request: %v, want not found", results[1])
	}
	for _, r := range []request.Request{r0, r1} {
		got, err := request.Get(f.ctx, f.db, r.ID, false)
		f.must(err)
		if got.State != request.StateApproved {
			t.Errorf("%s: %s, want APPROVED", r.Name(), got.State)
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

// TestApprovalsInOneBatchRecordWhatOneAloneDoes: approvals that write
// together (store.SetWrite) leave the same rows as an approval alone: the
// virtual cluster, the request and their two events with every column the
// event feed and audit reads filter on; each approval's events in its
// order, the batch's in the order the approvals ran.
func TestApprovalsInOneBatchRecordWhatOneAloneDoes(t *testing.T) {
	f := newFixture(t)
	var rs []request.Request
	for _, id := range []string{"solo", "m1", "m2", "m3"} {
		r, err := f.create(createVC(id, 1, nil))
		f.must(err)
		rs = append(rs, r)
	}
	solo, err := f.approve(rs[0])
	f.must(err)
	before := f.db.GroupStats()
	for i, err := range f.lineUpApprovals(rs[1:]...) {
		if err != nil {
			t.Fatalf("approval %d: %v", i, err)
		}
	}
	if got := f.db.GroupStats().Since(before); got.SetFlushes != 1 || got.SetFallbacks != 0 {
		t.Fatalf("the batch did not write as one: %+v", got)
	}
	// One approval's rows, its own names taken out.
	type event struct {
		id  int64
		row string
	}
	rowsOf := func(id, request string) (string, []event) {
		var state string
		f.must(f.db.QueryRow(f.ctx, `SELECT concat_ws(' ', r.state, r.decider, r.decision_reason, r.target_generation, r.version,
			v.phase, v.host_cluster_id, v.generation, v.version, v.gpu_centi, v.status_message, w.virtual_cluster_id IS NOT NULL)
			FROM requests r JOIN virtual_clusters v ON v.id = r.virtual_cluster_id
			LEFT JOIN reconcile_work w ON w.virtual_cluster_id = v.id WHERE v.id = $1`, id).Scan(&state))
		rows, err := f.db.Query(f.ctx, `SELECT a.id, concat_ws(' ', a.actor, a.actor_groups::text, a.action,
			replace(replace(a.resource, $3, 'R'), $1, 'X'), a.correlation_id, a.department_id, a.team_id,
			a.department_uid = (SELECT uid FROM departments WHERE id = 'research'),
			a.team_uid = (SELECT uid FROM teams WHERE id = 'team-a'),
			a.resource_uid = v.uid, a.event_type, a.before->>'phase', a.after->>'phase', a.before->>'state', a.after->>'state')
			FROM audit_events a JOIN virtual_clusters v ON v.id = $2
			WHERE (a.resource = $3 OR a.resource LIKE '%' || $1) AND a.action NOT LIKE 'Create%' ORDER BY a.id`,
			"/"+id, id, request)
		f.must(err)
		defer rows.Close()
		var evs []event
		for rows.Next() {
			var e event
			f.must(rows.Scan(&e.id, &e.row))
			evs = append(evs, e)
		}
		f.must(rows.Err())
		return state, evs
	}
	wantState, want := rowsOf("solo", solo.Name())
	if len(want) < 2 {
		t.Fatalf("an approval alone recorded %v, want the request's and the virtual cluster's events", want)
	}
	var ids [][]int64
	for i, id := range []string{"m1", "m2", "m3"} {
		state, got := rowsOf(id, rs[i+1].Name())
		if state != wantState {
			t.Errorf("%s: request and virtual cluster %q, want %q (as %s alone)", id, state, wantState, solo.Name())
		}
		if len(got) != len(want) {
			t.Fatalf("%s: events %v, want %v", id, got, want)
		}
		var mine []int64
		for i := range got {
			if got[i].row != want[i].row {
				t.Errorf("%s: event %d is\n  %s\nwant\n  %s", id, i, got[i].row, want[i].row)
			}
			mine = append(mine, got[i].id)
		}
		ids = append(ids, mine)
	}
	for i := range ids {
		for k := range ids[i] {
			if i > 0 && ids[i][k] <= ids[i-1][k] {
				t.Errorf("event %d of approval %d has id %d, not after approval %d's (%d)", k, i, ids[i][k], i-1, ids[i-1][k])
			}
		}
	}
}

// TestRequestCreatesInOneBatchWriteAsOne: request creates that write
// together (store.SetWrite) leave what one alone does: the request, its
// pending virtual cluster and their events; one whose virtual cluster
// name is taken gets the error it gets alone, and the others are stored.
func TestRequestCreatesInOneBatchWriteAsOne(t *testing.T) {
	f := newFixture(t)
	expire := f.now.Add(48 * time.Hour)
	payload := func(vc string) request.Payload {
		p := createVC(vc, 1, &expire)
		p.Create.Spec.Placement.Labels = map[string]string{"zone": "a"}
		p.Create.Spec.Limit = &quota.Resources{GPU: quota.GPUs(2)}
		p.Create.Spec.DisplayName = "display"
		return p
	}
	solo, err := f.create(payload("solo"))
	f.must(err)
	create := func(vc string) func() error {
		c := request.NewCreateAhead("research")
		return func() error {
			return f.db.InGroupTxPrefetched(f.ctx, tenancy.DepartmentGroup("research"), request.Creates, c, func(ctx context.Context, tx *store.Tx) error {
				_, err := f.svc.CreateAhead(ctx, tx, bob, "", f.team, "test", payload(vc), c)
				return err
			})
		}
	}
	lineUp := func(calls ...func() error) ([]error, uint64, uint64) {
		before := f.db.GroupStats()
		results := storetest.LineUp(t, f.ctx, f.db, tenancy.DepartmentGroup("research"), nil, calls...)
		d := f.db.GroupStats().Since(before)
		return results, d.SetFlushes, d.SetFallbacks
	}
	results, set, fallbacks := lineUp(create("m1"), create("m2"), create("m3"))
	for _, err := range results {
		f.must(err)
	}
	if set != 1 || fallbacks != 0 {
		t.Errorf("three creates: %d set flushes, %d fallbacks, want them written as one", set, fallbacks)
	}
	results, _, fallbacks = lineUp(create("n1"), create("m2"), create("n3"))
	if results[0] != nil || results[2] != nil || errs.KindOf(results[1]) != errs.KindAlreadyExists {
		t.Fatalf("creates n1, m2 (taken), n3: %v, want nil, already exists, nil", results)
	}
	if fallbacks != 1 {
		t.Errorf("%d fallbacks, want the batch's set writes undone once", fallbacks)
	}
	row := func(vc string) string {
		var s string
		f.must(f.db.QueryRow(f.ctx, `SELECT concat_ws(' ', r.team_id, r.department_id, r.kind, r.payload->'create'->>'virtualClusterId' = v.id,
			r.justification, r.state, r.requester, r.version, r.create_time = r.update_time, r.create_time = v.create_time,
			v.create_time = v.update_time,
			v.team_id, v.display_name, v.gpu_centi, v.cpu_millis, v.memory_bytes, v.limit_gpu_centi, v.limit_cpu_millis,
			v.limit_memory_bytes, v.over_quota_weight, v.priority, v.allow_fractional_gpus, v.kubernetes_version,
			v.chart_version, v.expire_time, v.phase, v.placement_host_cluster, v.placement_labels, v.generation, v.version,
			(SELECT string_agg(concat_ws(' ', a.actor, a.action, a.department_id, a.team_id, a.resource_uid = v.uid,
			        a.event_type, a.after->>'phase', a.after->>'state'), '; ' ORDER BY a.id)
			   FROM audit_events a WHERE a.resource IN ('teams/team-a/virtualClusters/' || v.id, 'requests/' || r.id)))
			FROM requests r JOIN virtual_clusters v ON v.id = r.virtual_cluster_id WHERE v.id = $1`, vc).Scan(&s))
		return s
	}
	want := row("solo")
	if solo.State != request.StatePending {
		t.Fatalf("the request alone is %s, want pending", solo.State)
	}
	for _, vc := range []string{"m1", "m2", "m3", "n1", "n3"} {
		if got := row(vc); got != want {
			t.Errorf("%s: %s\nwant (as one alone): %s", vc, got, want)
		}
	}
	var requests int
	f.must(f.db.QueryRow(f.ctx, `SELECT count(*) FROM requests`).Scan(&requests))
	if requests != 6 {
		t.Errorf("%d requests stored, want 6 (the refused create left none)", requests)
	}
}
