package tenancy

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Tier is a team's isolation tier (the API's IsolationTier names).
type Tier string

// Isolation tiers.
const (
	TierShared    Tier = "SHARED"
	TierDedicated Tier = "DEDICATED"
	// TierSandbox: a fenced node slice of the team's own where its virtual
	// cluster runs its own scheduler.
	TierSandbox Tier = "SANDBOX"
)

// Tiers are the valid tiers, in API order.
var Tiers = []Tier{TierShared, TierDedicated, TierSandbox}

// WholeGPUsOnly reports tiers with whole GPUs only: KAI does not isolate GPU memory between pods sharing a
// GPU, so a DEDICATED team's quotas are whole GPUs.
func (t Tier) WholeGPUsOnly() bool { return t == TierDedicated || t == TierSandbox }

// OwnPool reports tiers whose teams have a node pool of their own.
func (t Tier) OwnPool() bool { return t == TierDedicated || t == TierSandbox }

// ResolvePool is the node pool of team (of tier) when asked names one
// ("" = the tier's default), and whether that is a choice other than the
// default, which only platform admins may make (a pool is physical nodes;
// the API layer checks who asks). SHARED teams share names.SharedPool; a
// DEDICATED team has one of its own, names.DedicatedPool(team) by default.
func ResolvePool(v *errs.Violations, field string, tier Tier, team, asked string) (pool string, custom bool) {
	switch tier {
	case TierShared:
		if asked != "" && asked != names.SharedPool {
			v.Add(field, "SHARED teams run in the shared pool %q; only DEDICATED and SANDBOX teams have a node pool of their own", names.SharedPool)
		}
		return names.SharedPool, false
	case TierDedicated, TierSandbox:
		def := names.DedicatedPool(team)
		if tier == TierSandbox {
			def = names.SandboxPool(team)
		}
		if asked == "" || asked == def {
			return def, false
		}
		if why := names.CheckPool(asked); why != "" {
			v.Add(field, "%q: %s", asked, why)
			return "", false
		}
		return asked, true
	}
	return "", false
}

// CustomPoolDenied refuses a node pool chosen by someone who is not a
// platform admin.
func CustomPoolDenied(team string) error {
	return errs.PermissionDenied("only platform admins choose a DEDICATED team's node pool; leave node_pool empty for the default %q", names.DedicatedPool(team))
}

// poolTaken is the error for a node pool another DEDICATED team already has.
func poolTaken(field, pool string) error {
	e := errs.FailedPrecondition(errs.ReasonTierViolation, "node pool %q is already dedicated to another team", pool).With("node_pool", pool)
	e.Violations = []errs.FieldViolation{{Field: field, Description: fmt.Sprintf("node pool %q is already dedicated to another team; choose another one", pool)}}
	return e
}

// Team is a stored team.
type Team struct {
	// UID names this incarnation: a team created later with the same id
	// gets another, and its members do not read this one's history.
	UID                         string
	ID, Department, DisplayName string
	Tier                        Tier
	// Pool is the team's node pool: names.SharedPool for SHARED teams,
	// the team's own for DEDICATED ones (ResolvePool).
	Pool  string
	Quota quota.Resources
	// AutoSleepAfter puts the team's virtual clusters to sleep once idle
	// this long (0: never).
	AutoSleepAfter   time.Duration
	Version          int64
	Created, Updated time.Time
}

// Auto-sleep bounds: shorter would sleep clusters between two kubectl
// runs; longer is no longer "idle".
const (
	MinAutoSleepAfter = 10 * time.Minute
	MaxAutoSleepAfter = 30 * 24 * time.Hour
)

// CheckAutoSleepAfter validates an auto-sleep duration (0 turns it off).
func CheckAutoSleepAfter(v *errs.Violations, field string, d time.Duration) {
	if d != 0 && (d < MinAutoSleepAfter || d > MaxAutoSleepAfter || d%time.Second != 0) {
		v.Add(field, "must be 0 (never) or whole seconds between %s and %s (got %s)", MinAutoSleepAfter, MaxAutoSleepAfter, d)
	}
}

// Name is the API resource name.
func (t Team) Name() string { return names.Team(t.ID) }

// Etag of the current version.
func (t Team) Etag() string { return store.Etag(t.Version, t.Updated) }

type teamJSON struct {
	Name          string           `json:"name,omitempty"`
	Department    string           `json:"department,omitempty"`
	DisplayName   string           `json:"display_name,omitempty"`
	IsolationTier Tier             `json:"isolation_tier,omitempty"`
	Quota         *jsonshape.Quota `json:"quota,omitempty"`
	Etag          string           `json:"etag,omitempty"`
	CreateTime    *jsonshape.Time  `json:"create_time,omitempty"`
	UpdateTime    *jsonshape.Time  `json:"update_time,omitempty"`
	NodePool      string           `json:"node_pool,omitempty"`
	UID           string           `json:"uid,omitempty"`
	// AutoSleepAfter is protojson's Duration form, e.g. "3600s".
	AutoSleepAfter string `json:"auto_sleep_after,omitempty"`
}

// Snapshot renders t as the API does (the Team message), for audit.
func (t Team) Snapshot() any {
	s := teamJSON{Name: t.Name(), Department: names.Department(t.Department), DisplayName: t.DisplayName,
		IsolationTier: t.Tier, Quota: jsonshape.QuotaOf(t.Quota), Etag: t.Etag(),
		CreateTime: &jsonshape.Time{Time: t.Created}, UpdateTime: &jsonshape.Time{Time: t.Updated}, NodePool: t.Pool, UID: t.UID}
	if t.AutoSleepAfter > 0 {
		s.AutoSleepAfter = strconv.FormatInt(int64(t.AutoSleepAfter/time.Second), 10) + "s"
	}
	return s
}

// CreateTeam stores a team whose quota fits its department's budget and
// its node pool (t.Pool, from ResolvePool; empty: the tier's default).
func (s *Service) CreateTeam(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, t Team) (Team, error) {
	return s.CreateTeamAhead(ctx, tx, actor, requestID, t, nil)
}

// CreateTeamAhead is CreateTeam for a create whose reads TeamChanges may
// have made (c, nil when not run with it).
func (s *Service) CreateTeamAhead(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, t Team, c *TeamChange) (Team, error) {
	c.changed(quota.Resources{}, quota.Resources{})
	if t.Pool == "" {
		var v errs.Violations
		t.Pool, _ = ResolvePool(&v, "team.node_pool", t.Tier, t.ID, "")
	}
	// A team without quota takes nothing from its department or pool, so
	// it needs neither their locks nor their sums (four statements and a
	// wait behind every other change of the department). The department
	// must still exist: the foreign key checks that, under a share lock
	// that a concurrent DeleteDepartment's row lock excludes.
	if !t.Quota.IsZero() {
		if err := s.checkNewTeamFits(ctx, tx, t, c); err != nil {
			return t, err
		}
	}
	row, err := insertTeam(ctx, tx, t)
	if err != nil {
		return row, err
	}
	if err := record(ctx, tx, actor, "CreateTeam", row.Name(), requestID, row.Department, row.ID, nil, row.Snapshot()); err != nil {
		return row, err
	}
	c.changed(quota.Resources{}, row.Quota)
	return row, nil
}

// checkNewTeamFits locks t's department and pool and checks that t's quota
// fits both (c: as for CreateTeamAhead).
func (s *Service) checkNewTeamFits(ctx context.Context, tx *store.Tx, t Team, c *TeamChange) error {
	budget, assigned, ok := c.ahead(tx)
	if !ok {
		var b store.Batch
		QueueLockDepartment(&b, &budget, t.Department)
		queueAssignedExcept(&b, &assigned, t.Department, t.ID)
		if err := tx.Send(ctx, &b); err != nil {
			return err
		}
	}
	path := []quota.Node{{Level: quota.LevelDepartment, Name: names.Department(t.Department), Capacity: budget, Used: assigned}}
	if pn, ok, err := s.PoolNode(ctx, tx, t.Pool, t.ID); err != nil {
		return err
	} else if ok {
		path = append(path, pn)
	}
	return FitError("team.quota", quota.CheckFit(path, t.Quota))
}

// UpdateTeam locks the department and the team, checks etag, lets change
// edit a copy, enforces the tier and hierarchy rules (department budget and
// node pool) and stores it; the team's virtual clusters are re-applied
// (their parent queue, or their pool, changed).
func (s *Service) UpdateTeam(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, dept, etag string, quotaChanges bool, change func(cur Team, next *Team) error) (Team, error) {
	return s.UpdateTeamAhead(ctx, tx, actor, id, dept, etag, quotaChanges, change, nil)
}

// UpdateTeamAhead is UpdateTeam for an update whose reads TeamChanges may
// have made (c, nil when not run with it).
func (s *Service) UpdateTeamAhead(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, dept, etag string, quotaChanges bool,
	change func(cur Team, next *Team) error, c *TeamChange) (Team, error) {
	c.changed(quota.Resources{}, quota.Resources{})
	var budget, assigned, children quota.Resources
	var cur Team
	var ok bool
	if budget, assigned, ok = c.ahead(tx); ok {
		cur, children = c.cur, c.children
	} else {
		// One round trip for what the checks below read, in lock order
		// (department, then team): the sums are read under both locks.
		var b store.Batch
		QueueLockDepartment(&b, &budget, dept)
		QueueGetTeam(&b, &cur, id, true)
		if quotaChanges {
			queueAssignedExcept(&b, &assigned, dept, id)
			virtualcluster.QueueQuotaOfTeam(&b, &children, id, "")
		}
		if err := tx.Send(ctx, &b); err != nil {
			return cur, err
		}
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return cur, err
	}
	next := cur
	if err := change(cur, &next); err != nil {
		return cur, err
	}
	if next.Tier.WholeGPUsOnly() {
		if !next.Quota.GPU.IsWhole() {
			return cur, DedicatedGPUError("team.quota.gpu", next.Quota.GPU)
		}
		fractional, err := virtualcluster.CountFractional(ctx, tx, cur.ID)
		if err != nil {
			return cur, err
		}
		if fractional > 0 && !cur.Tier.WholeGPUsOnly() {
			return cur, errs.FailedPrecondition(errs.ReasonTierViolation,
				"%s has %d virtual cluster(s) using fractional GPUs; resize them before moving the team to DEDICATED", cur.Name(), fractional)
		}
	}
	var shortfalls []quota.Shortfall
	if quotaChanges {
		node := quota.Node{Level: quota.LevelDepartment, Name: names.Department(cur.Department), Capacity: budget, Used: assigned}
		shortfalls = quota.CheckFitChange([]quota.Node{node}, cur.Quota, next.Quota)
	}
	if quotaChanges || next.Pool != cur.Pool {
		// In a new pool the whole quota must fit, not just its growth.
		if pn, ok, err := s.PoolNode(ctx, tx, next.Pool, cur.ID); err != nil {
			return cur, err
		} else if ok && next.Pool != cur.Pool {
			shortfalls = append(shortfalls, quota.CheckFit([]quota.Node{pn}, next.Quota)...)
		} else if ok {
			shortfalls = append(shortfalls, quota.CheckFitChange([]quota.Node{pn}, cur.Quota, next.Quota)...)
		}
	}
	if err := FitError("team.quota", shortfalls); err != nil {
		return cur, err
	}
	if quotaChanges {
		if err := BelowChildrenError("team.quota", "team", cur.Name(), next.Quota, children); err != nil {
			return cur, err
		}
	}
	row := updateTeamDeferred(tx, cur, next)
	if err := workqueue.EnqueueTeam(ctx, tx, cur.ID); err != nil {
		return row, err
	}
	if err := record(ctx, tx, actor, "UpdateTeam", row.Name(), "", cur.Department, cur.ID, cur.Snapshot(), row.Snapshot()); err != nil {
		return row, err
	}
	c.changed(cur.Quota, row.Quota)
	return row, nil
}

// SetTeamQuota applies an approved CHANGE_TEAM_QUOTA request (the caller
// checked the fit and holds the department lock) and re-applies the
// team's queues.
func SetTeamQuota(ctx context.Context, tx *store.Tx, actor reqctx.Principal, cur Team, q quota.Resources) error {
	row, err := setTeamQuota(ctx, tx, cur.ID, q)
	if err != nil {
		return err
	}
	if err := record(ctx, tx, actor, "ChangeTeamQuota", cur.Name(), "", cur.Department, cur.ID, cur.Snapshot(), row.Snapshot()); err != nil {
		return err
	}
	// The team's parent queue is re-applied through its virtual clusters'
	// reconciles; the database change is the decision.
	return workqueue.EnqueueTeam(ctx, tx, cur.ID)
}

// DeleteTeam deletes a team none of whose virtual clusters is left; its
// finished requests and gone virtual clusters go with it.
func (s *Service) DeleteTeam(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, dept, etag string) error {
	if _, err := LockDepartment(ctx, tx, dept); err != nil {
		return err
	}
	cur, err := GetTeam(ctx, tx, id, true)
	if err != nil {
		return err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return err
	}
	live, err := virtualcluster.CountNotGone(ctx, tx, cur.ID)
	if err != nil {
		return err
	}
	if live > 0 {
		return errs.FailedPrecondition(errs.ReasonHasChildren,
			"%s still has %d virtual cluster(s); delete them first", cur.Name(), live).With("virtual_clusters", strconv.Itoa(live))
	}
	if err := s.history.DeleteTeamHistory(ctx, tx, cur.ID); err != nil {
		return hasDependents(err, cur.Name())
	}
	if err := deleteTeam(ctx, tx, cur.ID); err != nil {
		return hasDependents(err, cur.Name())
	}
	return record(ctx, tx, actor, "DeleteTeam", cur.Name(), "", cur.Department, cur.ID, cur.Snapshot(), nil)
}
