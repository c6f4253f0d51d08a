package tenancy_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

func TestMain(m *testing.M) { storetest.Main(m) }

var alice = reqctx.Principal{Subject: "sub-alice", Username: "alice"}

func gpus(n int64) quota.Resources { return quota.Resources{GPU: quota.GPUs(n)} }

type fixture struct {
	t   *testing.T
	ctx context.Context
	db  *store.DB
	svc *tenancy.Service
}

func newFixture(t *testing.T) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &fixture{t: t, ctx: ctx, db: store.New(storetest.Pool(t)),
		svc: tenancy.NewService(tenancy.StaticCapacity(gpus(16)), 1.0, request.TeamHistory{})}
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

func (f *fixture) department(id string, budget quota.Resources) error {
	return f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := f.svc.CreateDepartment(ctx, tx, alice, "", tenancy.Department{ID: id, Budget: budget})
		return err
	})
}

func (f *fixture) team(id, dept string, tier tenancy.Tier, q quota.Resources) error {
	return f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := f.svc.CreateTeam(ctx, tx, alice, "", tenancy.Team{ID: id, Department: dept, Tier: tier, Quota: q})
		return err
	})
}

// liveVC stores an approved virtual cluster holding q in team.
func (f *fixture) liveVC(team, id string, q quota.Resources, fractional bool) {
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		if _, err := virtualcluster.InsertPending(ctx, tx, team, id, virtualcluster.Spec{Quota: q, AllowFractionalGPUs: fractional}); err != nil {
			return err
		}
		if err := virtualcluster.PlaceOn(ctx, tx, id, "default"); err != nil {
			return err
		}
		_, err := virtualcluster.Move(ctx, tx, id, virtualcluster.PhaseProvisioning, q, nil, virtualcluster.Versions{}, false)
		return err
	}))
}

func wantReason(t *testing.T, err error, kind errs.Kind, reason string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Kind != kind || e.Reason != reason {
		t.Fatalf("got %v, want %v %s", err, kind, reason)
	}
}

// The hierarchy holds on a real database: departments within the cluster,
// teams within their department, and no parent below its children.
func TestHierarchy(t *testing.T) {
	f := newFixture(t)
	f.must(f.department("research", gpus(10)))
	wantReason(t, f.department("ops", gpus(7)), errs.KindFailedPrecondition, errs.ReasonQuotaExceeded) // 16 - 10 = 6 free
	f.must(f.department("ops", gpus(6)))

	f.must(f.team("a", "research", tenancy.TierShared, gpus(6)))
	wantReason(t, f.team("b", "research", tenancy.TierShared, gpus(5)), errs.KindFailedPrecondition, errs.ReasonQuotaExceeded)
	f.must(f.team("b", "research", tenancy.TierShared, gpus(4)))

	// The department cannot shrink below what its teams hold.
	err := f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := f.svc.UpdateDepartment(ctx, tx, alice, "research", "", true, func(d *tenancy.Department) { d.Budget = gpus(9) })
		return err
	})
	wantReason(t, err, errs.KindFailedPrecondition, errs.ReasonQuotaExceeded)

	// A team cannot shrink below its virtual clusters' quota, and one with
	// fractional GPUs cannot become DEDICATED.
	f.liveVC("a", "vc1", quota.Resources{GPU: 350}, true)
	update := func(change func(next *tenancy.Team), quotaChanges bool) error {
		return f.tx(func(ctx context.Context, tx *store.Tx) error {
			_, err := f.svc.UpdateTeam(ctx, tx, alice, "a", "research", "", quotaChanges, func(_ tenancy.Team, next *tenancy.Team) error {
				change(next)
				return nil
			})
			return err
		})
	}
	wantReason(t, update(func(n *tenancy.Team) { n.Quota = gpus(3) }, true), errs.KindFailedPrecondition, errs.ReasonQuotaExceeded)
	wantReason(t, update(func(n *tenancy.Team) { n.Tier, n.Quota = tenancy.TierDedicated, gpus(6) }, false),
		errs.KindFailedPrecondition, errs.ReasonTierViolation)
	f.must(update(func(n *tenancy.Team) { n.Quota = gpus(4) }, true))

	// Every committed change left exactly one audit event.
	events, _, err := audit.List(f.ctx, f.db, 100, "", audit.FirstPage, store.Scope{All: true}, nil)
	f.must(err)
	if got := len(events); got != 5 { // 2 departments, 2 teams, 1 team update
		for _, e := range events {
			t.Logf("%s %s", e.Action, e.Resource)
		}
		t.Fatalf("%d audit events, want 5", got)
	}
	if events[0].Action != "UpdateTeam" || events[0].Before["quota"].(map[string]any)["gpu"] != "6" || events[0].After["quota"].(map[string]any)["gpu"] != "4" {
		t.Errorf("newest event %s before %v after %v", events[0].Action, events[0].Before, events[0].After)
	}
}

// A team goes only when none of its virtual clusters is left; its history
// (finished requests, gone virtual clusters) goes with it.
func TestDeleteTeam(t *testing.T) {
	f := newFixture(t)
	f.must(f.department("research", gpus(8)))
	f.must(f.team("a", "research", tenancy.TierShared, gpus(4)))
	f.liveVC("a", "vc1", gpus(1), false)
	del := func() error {
		return f.tx(func(ctx context.Context, tx *store.Tx) error {
			return f.svc.DeleteTeam(ctx, tx, alice, "a", "research", "")
		})
	}
	wantReason(t, del(), errs.KindFailedPrecondition, errs.ReasonHasChildren)
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		if _, err := virtualcluster.Move(ctx, tx, "vc1", virtualcluster.PhaseDeleting, gpus(1), nil, virtualcluster.Versions{}, true); err != nil {
			return err
		}
		_, err := virtualcluster.MarkDeleted(ctx, tx, "vc1")
		return err
	}))
	f.must(del())
	if _, err := tenancy.GetTeam(f.ctx, f.db, "a", false); errs.KindOf(err) != errs.KindNotFound {
		t.Fatalf("team still there: %v", err)
	}
	if _, err := virtualcluster.Get(f.ctx, f.db, "vc1", false); errs.KindOf(err) != errs.KindNotFound {
		t.Fatalf("gone virtual cluster still there: %v", err)
	}
	// The department's assigned totals (kept by a trigger) are back to zero.
	children, err := tenancy.ChildrenOfDepartment(f.ctx, f.db, "research")
	f.must(err)
	if !children.IsZero() {
		t.Errorf("department still assigns %+v", children)
	}
}

func TestGrantsOf(t *testing.T) {
	f := newFixture(t)
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := f.svc.CreateDepartment(ctx, tx, alice, "", tenancy.Department{ID: "research", AdminGroups: []string{"research-admins"}})
		return err
	}))
	f.must(f.team("a", "research", tenancy.TierShared, quota.Resources{}))
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		for _, m := range []tenancy.Member{
			{Team: "a", ID: "bob", Kind: tenancy.KindUser, Principal: "bob@x", Role: tenancy.RoleOwner},
			{Team: "a", ID: "eng", Kind: tenancy.KindGroup, Principal: "eng", Role: tenancy.RoleViewer},
		} {
			if _, err := f.svc.CreateMember(ctx, tx, alice, "", "research", m); err != nil {
				return err
			}
		}
		return nil
	}))
	grants, err := tenancy.GrantsOf(f.ctx, f.db, "bob@x", []string{"eng", "research-admins"})
	f.must(err)
	var team, dept int
	for _, g := range grants {
		if g.Team == "" {
			dept++
			continue
		}
		team++
		if g.Department != "research" {
			t.Errorf("grant %+v", g)
		}
	}
	if team != 2 || dept != 1 {
		t.Errorf("grants %+v: want two team grants (user and group) and one department", grants)
	}
	// The same principal twice on a team is refused with a clear error.
	err = f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := f.svc.CreateMember(ctx, tx, alice, "", "research", tenancy.Member{Team: "a", ID: "bob2", Kind: tenancy.KindUser, Principal: "bob@x", Role: tenancy.RoleViewer})
		return err
	})
	wantReason(t, err, errs.KindAlreadyExists, errs.ReasonAlreadyExists)
}

// TestGetTeamWithGrantsMatchesTheTwoReads: the one-statement read returns
// what GetTeam and GrantsOf return separately, for a member by name, a
// member by group, a department admin and a stranger; and NOT_FOUND for a
// missing team.
func TestGetTeamWithGrantsMatchesTheTwoReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := f.svc.CreateDepartment(ctx, tx, alice, "", tenancy.Department{ID: "d1", Budget: gpus(4), AdminGroups: []string{"d1-admins"}})
		return err
	}))
	f.must(f.team("t1", "d1", tenancy.TierShared, gpus(1)))
	f.must(f.team("t2", "d1", tenancy.TierShared, gpus(1)))
	for _, m := range []tenancy.Member{
		{Team: "t1", ID: "bob", Kind: tenancy.KindUser, Principal: "bob", Role: tenancy.RoleOwner},
		{Team: "t2", ID: "devs", Kind: tenancy.KindGroup, Principal: "devs", Role: tenancy.RoleViewer},
		{Team: "t1", ID: "devs", Kind: tenancy.KindGroup, Principal: "devs", Role: tenancy.RoleMember},
	} {
		f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
			_, err := f.svc.CreateMember(ctx, tx, alice, "", "d1", m)
			return err
		}))
	}
	for _, who := range []struct {
		user   string
		groups []string
	}{{"bob", nil}, {"carol", []string{"devs"}}, {"dora", []string{"d1-admins"}}, {"eve", []string{"others"}}, {"bob", []string{"devs", "d1-admins"}}} {
		for _, team := range []string{"t1", "t2"} {
			got, grants, err := tenancy.GetTeamWithGrants(f.ctx, f.db, team, who.user, who.groups)
			f.must(err)
			want, err := tenancy.GetTeam(f.ctx, f.db, team, false)
			f.must(err)
			wantGrants, err := tenancy.GrantsOf(f.ctx, f.db, who.user, who.groups)
			f.must(err)
			if got.UID != want.UID || got.ID != want.ID || got.Quota != want.Quota || got.Version != want.Version || !got.Created.Equal(want.Created) {
				t.Errorf("%s/%s: team %+v, want %+v", who.user, team, got, want)
			}
			if !sameGrants(grants, wantGrants) {
				t.Errorf("%s %v reading %s: grants %+v, want %+v", who.user, who.groups, team, grants, wantGrants)
			}
		}
	}
	if _, _, err := tenancy.GetTeamWithGrants(f.ctx, f.db, "nope", "bob", nil); errs.KindOf(err) != errs.KindNotFound {
		t.Errorf("missing team: %v, want NOT_FOUND", err)
	}
}

func sameGrants(a, b []tenancy.Grant) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[tenancy.Grant]int{}
	for _, g := range a {
		count[g]++
	}
	for _, g := range b {
		count[g]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

// Team creates and updates that meet in one batch of their department's
// changes read ahead together (tenancy.TeamChanges) and still take the
// department's budget in turn, each seeing what the ones ahead of it
// moved: in a 4-GPU department with teams a and b (1 GPU each), a grows
// to 2, b's growth to 3 no longer fits, a grows again to 3 (the same team
// twice: it reads for itself), and a new 1-GPU team c no longer fits.
func TestTeamChangesInOneBatchTakeTheBudgetInTurn(t *testing.T) {
	f := newFixture(t)
	f.must(f.department("lab", gpus(4)))
	f.must(f.team("a", "lab", tenancy.TierShared, gpus(1)))
	f.must(f.team("b", "lab", tenancy.TierShared, gpus(1)))
	update := func(id string, q quota.Resources) func() error {
		c := tenancy.NewTeamUpdate("lab", id)
		return func() error {
			return f.db.InGroupTxPrefetched(f.ctx, tenancy.DepartmentGroup("lab"), tenancy.TeamChanges, c, func(ctx context.Context, tx *store.Tx) error {
				_, err := f.svc.UpdateTeamAhead(ctx, tx, alice, id, "lab", "", true, func(_ tenancy.Team, next *tenancy.Team) error {
					next.Quota = q
					return nil
				}, c)
				return err
			})
		}
	}
	create := func(id string, q quota.Resources) func() error {
		team := tenancy.Team{ID: id, Department: "lab", Tier: tenancy.TierShared, Quota: q}
		c := tenancy.NewTeamCreate(team)
		return func() error {
			return f.db.InGroupTxPrefetched(f.ctx, tenancy.DepartmentGroup("lab"), tenancy.TeamChanges, c, func(ctx context.Context, tx *store.Tx) error {
				_, err := f.svc.CreateTeamAhead(ctx, tx, alice, "", team, c)
				return err
			})
		}
	}
	before := f.db.GroupStats()
	results := storetest.LineUp(t, f.ctx, f.db, tenancy.DepartmentGroup("lab"), nil,
		update("a", gpus(2)), update("b", gpus(3)), update("a", gpus(3)), create("c", gpus(1)))
	if results[0] != nil || results[2] != nil {
		t.Fatalf("results %v: a's growths must fit", results)
	}
	wantReason(t, results[1], errs.KindFailedPrecondition, errs.ReasonQuotaExceeded)
	wantReason(t, results[3], errs.KindFailedPrecondition, errs.ReasonQuotaExceeded)
	if got := f.db.GroupStats().Since(before); got.Batches != 2 || got.Members != 5 {
		t.Errorf("batches %+v -> %+v, want the four changes in one batch", before, got)
	}
	// a was changed twice (version 3), b not at all.
	for id, want := range map[string]struct {
		q       quota.Resources
		version int64
	}{"a": {gpus(3), 3}, "b": {gpus(1), 1}} {
		team, err := tenancy.GetTeam(f.ctx, f.db, id, false)
		f.must(err)
		if team.Quota != want.q || team.Version != want.version {
			t.Errorf("team %s has %v at version %d, want %v at %d", id, team.Quota, team.Version, want.q, want.version)
		}
	}
	if _, err := tenancy.GetTeam(f.ctx, f.db, "c", false); errs.KindOf(err) != errs.KindNotFound {
		t.Errorf("team c: %v, want it not created", err)
	}
	if assigned, err := tenancy.ChildrenOfDepartment(f.ctx, f.db, "lab"); err != nil || assigned != gpus(4) {
		t.Errorf("lab's teams are assigned %v (%v), want 4 GPUs", assigned, err)
	}
}

// Team creates and updates that meet in one batch write their rows in one
// statement per kind of write (store.SetWrite) and leave what each would
// alone: the team row and its event, the department's assigned totals.
// When one of them fails in the database (a team id already taken), that
// one gets the error it gets alone and the others are written.
func TestTeamChangesInOneBatchWriteAsOne(t *testing.T) {
	f := newFixture(t)
	f.must(f.department("lab", gpus(16)))
	f.must(f.team("solo", "lab", tenancy.TierShared, gpus(1)))
	create := func(id string) func() error {
		team := tenancy.Team{ID: id, Department: "lab", Tier: tenancy.TierShared, Quota: gpus(1)}
		c := tenancy.NewTeamCreate(team)
		return func() error {
			return f.db.InGroupTxPrefetched(f.ctx, tenancy.DepartmentGroup("lab"), tenancy.TeamChanges, c, func(ctx context.Context, tx *store.Tx) error {
				_, err := f.svc.CreateTeamAhead(ctx, tx, alice, "", team, c)
				return err
			})
		}
	}
	update := func(id string, q quota.Resources) func() error {
		c := tenancy.NewTeamUpdate("lab", id)
		return func() error {
			return f.db.InGroupTxPrefetched(f.ctx, tenancy.DepartmentGroup("lab"), tenancy.TeamChanges, c, func(ctx context.Context, tx *store.Tx) error {
				_, err := f.svc.UpdateTeamAhead(ctx, tx, alice, id, "lab", "", true, func(_ tenancy.Team, next *tenancy.Team) error {
					next.Quota, next.DisplayName = q, "grown "+id
					return nil
				}, c)
				return err
			})
		}
	}
	lineUp := func(calls ...func() error) ([]error, uint64, uint64) {
		before := f.db.GroupStats()
		results := storetest.LineUp(t, f.ctx, f.db, tenancy.DepartmentGroup("lab"), nil, calls...)
		d := f.db.GroupStats().Since(before)
		return results, d.SetFlushes, d.SetFallbacks
	}
	results, set, fallbacks := lineUp(create("x1"), create("x2"), create("x3"))
	for _, err := range results {
		f.must(err)
	}
	if set != 1 || fallbacks != 0 {
		t.Errorf("three creates: %d set flushes, %d fallbacks, want them written as one", set, fallbacks)
	}
	results, _, fallbacks = lineUp(create("y1"), create("x2"), create("y3"))
	if results[0] != nil || results[2] != nil || errs.KindOf(results[1]) != errs.KindAlreadyExists {
		t.Fatalf("creates y1, x2 (taken), y3: %v, want nil, already exists, nil", results)
	}
	if fallbacks != 1 {
		t.Errorf("%d fallbacks, want the batch's set writes undone once", fallbacks)
	}
	row := func(id string) string {
		var s string
		f.must(f.db.QueryRow(f.ctx, `SELECT concat_ws(' ', t.department_id, t.display_name, t.isolation_tier, t.node_pool,
			t.gpu_centi, t.cpu_millis, t.memory_bytes, t.auto_sleep_after_seconds, t.version, t.create_time = t.update_time,
			(SELECT string_agg(concat_ws(' ', a.actor, a.action, a.department_id, a.team_id = t.id, a.team_uid = t.uid,
			        a.resource_uid = t.uid, a.event_type, a.after->>'displayName'), '; ' ORDER BY a.id)
			   FROM audit_events a WHERE a.resource = 'teams/' || t.id))
			FROM teams t WHERE t.id = $1`, id).Scan(&s))
		return s
	}
	want := row("solo")
	for _, id := range []string{"x1", "x2", "x3", "y1", "y3"} {
		if got := row(id); got != want {
			t.Errorf("team %s: %s\nwant (as one alone): %s", id, got, want)
		}
	}
	// The teams' virtual clusters are queued for a reconcile by the
	// updates (and only theirs).
	f.liveVC("x1", "vc-x1", gpus(1), false)
	f.liveVC("y1", "vc-y1", gpus(1), false)
	f.liveVC("x3", "vc-x3", gpus(1), false)
	f.must(f.tx(func(ctx context.Context, tx *store.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM reconcile_work`)
		return err
	}))
	results, set, _ = lineUp(update("x1", gpus(2)), update("x2", gpus(3)), update("y1", gpus(4)))
	for _, err := range results {
		f.must(err)
	}
	if set != 1 {
		t.Errorf("three updates: %d set flushes, want them written as one", set)
	}
	var queued string
	f.must(f.db.QueryRow(f.ctx, `SELECT coalesce(string_agg(virtual_cluster_id, ' ' ORDER BY virtual_cluster_id), '') FROM reconcile_work`).Scan(&queued))
	if queued != "vc-x1 vc-y1" {
		t.Errorf("queued for reconcile: %q, want the updated teams' virtual clusters vc-x1 vc-y1", queued)
	}
	for id, q := range map[string]quota.Resources{"x1": gpus(2), "x2": gpus(3), "y1": gpus(4), "x3": gpus(1)} {
		// (before the updates below)
		team, err := tenancy.GetTeam(f.ctx, f.db, id, false)
		f.must(err)
		wantVersion, wantName := int64(2), "grown "+id
		if id == "x3" {
			wantVersion, wantName = 1, ""
		}
		if team.Quota != q || team.Version != wantVersion || team.DisplayName != wantName {
			t.Errorf("team %s: %v %q at version %d, want %v %q at %d", id, team.Quota, team.DisplayName, team.Version, q, wantName, wantVersion)
		}
	}
	// An update of a team that is not there gets the not-found it gets
	// alone; the ones beside it go on.
	results, _, _ = lineUp(update("x3", gpus(2)), update("nope", gpus(1)), update("y3", gpus(2)))
	if results[0] != nil || results[2] != nil || errs.KindOf(results[1]) != errs.KindNotFound {
		t.Errorf("updates x3, nope (not there), y3: %v, want nil, not found, nil", results)
	}
	// solo 1 + x1 2 + x2 3 + x3 2 + y1 4 + y3 2 = 14 of 16: y1 may grow
	// to 6 (its own 4 is not counted twice), and then nothing more fits.
	results, _, _ = lineUp(update("y1", gpus(6)), update("solo", gpus(2)))
	if results[0] != nil {
		t.Errorf("y1 growing into what is left: %v", results[0])
	}
	wantReason(t, results[1], errs.KindFailedPrecondition, errs.ReasonQuotaExceeded)
	if assigned, err := tenancy.ChildrenOfDepartment(f.ctx, f.db, "lab"); err != nil || assigned != gpus(16) {
		t.Errorf("lab's teams are assigned %v (%v), want 16 GPUs", assigned, err)
	}
}
