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
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Department is a stored department: a budget and its admins.
type Department struct {
	// UID names this incarnation: a department created later with the
	// same id gets another, and none of this one's audit history.
	UID             string
	ID, DisplayName string
	Budget          quota.Resources
	AdminGroups     []string
	// RequesterCannotDecide: a request's requester may not approve or
	// reject it (separation of duties); platform admins may override.
	RequesterCannotDecide bool
	// SleepingKeepsQuota: sleeping virtual clusters keep their quota
	// reserved (the default).
	SleepingKeepsQuota bool
	Version            int64
	Created, Updated   time.Time
}

// Name is the API resource name.
func (d Department) Name() string { return names.Department(d.ID) }

// Etag of the current version.
func (d Department) Etag() string { return store.Etag(d.Version, d.Updated) }

type departmentJSON struct {
	Name        string           `json:"name,omitempty"`
	DisplayName string           `json:"display_name,omitempty"`
	QuotaBudget *jsonshape.Quota `json:"quota_budget,omitempty"`
	AdminGroups []string         `json:"admin_groups,omitempty"`
	UID         string           `json:"uid,omitempty"`
	// Always present: false is a setting worth seeing in the audit log.
	RequesterCannotDecide bool   `json:"requester_cannot_decide"`
	Etag                  string `json:"etag,omitempty"`
	// Always written (proto3 optional): false is a choice.
	SleepingKeepsQuota bool            `json:"sleeping_keeps_quota"`
	CreateTime         *jsonshape.Time `json:"create_time,omitempty"`
	UpdateTime         *jsonshape.Time `json:"update_time,omitempty"`
}

// Snapshot renders d as the API does (the Department message), for audit.
func (d Department) Snapshot() any {
	return departmentJSON{Name: d.Name(), DisplayName: d.DisplayName, QuotaBudget: jsonshape.QuotaOf(d.Budget),
		AdminGroups: d.AdminGroups, UID: d.UID, RequesterCannotDecide: d.RequesterCannotDecide, Etag: d.Etag(), SleepingKeepsQuota: d.SleepingKeepsQuota,
		CreateTime: &jsonshape.Time{Time: d.Created}, UpdateTime: &jsonshape.Time{Time: d.Updated}}
}

// CreateDepartment stores a department whose budget fits the cluster.
func (s *Service) CreateDepartment(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, d Department) (Department, error) {
	if err := LockCluster(ctx, tx); err != nil {
		return d, err
	}
	cluster, err := s.ClusterNode(ctx, tx, d.ID)
	if err != nil {
		return d, err
	}
	if err := quota.FitError("department.quota_budget", quota.CheckFit([]quota.Node{cluster}, d.Budget)); err != nil {
		return d, err
	}
	row, err := insertDepartment(ctx, tx, d)
	if err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "CreateDepartment", row.Name(), requestID, row.ID, "", nil, row.Snapshot())
}

// UpdateDepartment locks the department, checks etag, lets change edit a
// copy, checks a changed budget against the cluster and the department's
// teams, and stores it. A budget change re-applies the department's KAI
// queue through its virtual clusters.
func (s *Service) UpdateDepartment(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string, budgetChanges bool, change func(*Department)) (Department, error) {
	if budgetChanges {
		if err := LockCluster(ctx, tx); err != nil {
			return Department{}, err
		}
	}
	cur, err := GetDepartment(ctx, tx, id, true)
	if err != nil {
		return cur, err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return cur, err
	}
	next := cur
	change(&next)
	if budgetChanges {
		cluster, err := s.ClusterNode(ctx, tx, id)
		if err != nil {
			return cur, err
		}
		if err := quota.FitError("department.quota_budget", quota.CheckFitChange([]quota.Node{cluster}, cur.Budget, next.Budget)); err != nil {
			return cur, err
		}
		children, err := ChildrenOfDepartment(ctx, tx, id)
		if err != nil {
			return cur, err
		}
		if err := BelowChildrenError("department.quota_budget", "department", cur.Name(), next.Budget, children); err != nil {
			return cur, err
		}
	}
	row, err := updateDepartment(ctx, tx, next)
	if err != nil {
		return row, err
	}
	if budgetChanges {
		// The department's KAI parent queue carries the budget.
		if err := workqueue.EnqueueDepartment(ctx, tx, id); err != nil {
			return row, err
		}
	}
	return row, record(ctx, tx, actor, "UpdateDepartment", row.Name(), "", id, "", cur.Snapshot(), row.Snapshot())
}

// DeleteDepartment deletes a department that has no teams.
func (s *Service) DeleteDepartment(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string) error {
	cur, err := GetDepartment(ctx, tx, id, true)
	if err != nil {
		return err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return err
	}
	teams, err := countTeams(ctx, tx, id)
	if err != nil {
		return err
	}
	if teams > 0 {
		return errs.FailedPrecondition(errs.ReasonHasChildren,
			"%s still has %d team(s); delete them first", cur.Name(), teams).With("teams", strconv.Itoa(teams))
	}
	if err := deleteDepartment(ctx, tx, id); err != nil {
		return hasDependents(err, cur.Name())
	}
	return record(ctx, tx, actor, "DeleteDepartment", cur.Name(), "", id, "", cur.Snapshot(), nil)
}

// hasDependents turns a foreign-key violation on delete into a clear error.
func hasDependents(err error, resource string) error {
	if store.SQLState(err) == "23503" {
		return errs.Wrap(err, errs.KindFailedPrecondition, errs.ReasonHasChildren,
			"%s is still referenced (requests or virtual clusters); delete those first", resource)
	}
	return err
}
