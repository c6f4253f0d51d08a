package tenancy

import (
	"context"
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
)

// Tiers are the valid tiers, in API order.
var Tiers = []Tier{TierShared, TierDedicated}

// WholeGPUsOnly reports tiers with whole GPUs only: KAI does not isolate GPU memory between pods sharing a
// GPU, so a DEDICATED team's quotas are whole GPUs.
func (t Tier) WholeGPUsOnly() bool { return t == TierDedicated }

// Team is a stored team.
type Team struct {
	ID, Department, DisplayName string
	Tier                        Tier
	Quota                       quota.Resources
	Version                     int64
	Created, Updated            time.Time
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
}

// Snapshot renders t as the API does (the Team message), for audit.
func (t Team) Snapshot() any {
	return teamJSON{Name: t.Name(), Department: names.Department(t.Department), DisplayName: t.DisplayName,
		IsolationTier: t.Tier, Quota: jsonshape.QuotaOf(t.Quota), Etag: t.Etag(),
		CreateTime: &jsonshape.Time{Time: t.Created}, UpdateTime: &jsonshape.Time{Time: t.Updated}}
}

// CreateTeam stores a team whose quota fits its department's budget.
func (s *Service) CreateTeam(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, t Team) (Team, error) {
	budget, err := LockDepartment(ctx, tx, t.Department)
	if err != nil {
		return t, err
	}
	node, err := DepartmentNode(ctx, tx, t.Department, budget, t.ID)
	if err != nil {
		return t, err
	}
	if err := quota.FitError("team.quota", quota.CheckFit([]quota.Node{node}, t.Quota)); err != nil {
		return t, err
	}
	row, err := insertTeam(ctx, tx, t)
	if err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "CreateTeam", row.Name(), requestID, row.Department, row.ID, nil, row.Snapshot())
}

// UpdateTeam locks the department and the team, checks etag, lets change
// edit a copy, enforces the tier and hierarchy rules and stores it; the
// team's virtual clusters are re-applied (their parent queue changed).
func (s *Service) UpdateTeam(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, dept, etag string, quotaChanges bool, change func(cur Team, next *Team) error) (Team, error) {
	budget, err := LockDepartment(ctx, tx, dept)
	if err != nil {
		return Team{}, err
	}
	cur, err := GetTeam(ctx, tx, id, true)
	if err != nil {
		return cur, err
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
	if quotaChanges {
		node, err := DepartmentNode(ctx, tx, cur.Department, budget, cur.ID)
		if err != nil {
			return cur, err
		}
		if err := quota.FitError("team.quota", quota.CheckFitChange([]quota.Node{node}, cur.Quota, next.Quota)); err != nil {
			return cur, err
		}
		children, err := ChildrenOfTeam(ctx, tx, cur.ID)
		if err != nil {
			return cur, err
		}
		if err := BelowChildrenError("team.quota", "team", cur.Name(), next.Quota, children); err != nil {
			return cur, err
		}
	}
	row, err := updateTeam(ctx, tx, next)
	if err != nil {
		return row, err
	}
	if err := workqueue.EnqueueTeam(ctx, tx, cur.ID); err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "UpdateTeam", row.Name(), "", cur.Department, cur.ID, cur.Snapshot(), row.Snapshot())
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
