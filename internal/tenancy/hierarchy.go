package tenancy

import (
	"context"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// The quota hierarchy (cluster -> department budget -> team quota ->
// virtual-cluster quota) is checked here and only here, inside the
// transaction that makes the change. Concurrency: every change below a
// department first locks that department's row (LockDepartment), and
// changes to department budgets take a cluster-wide advisory lock
// (LockCluster), so two changes that each fit alone but not together are
// serialised and the second one sees the first.

// ClusterNode is the cluster level: capacity x overcommit, used = the sum of
// all department budgets except excludeDept.
func (s *Service) ClusterNode(ctx context.Context, q store.Querier, excludeDept string) (quota.Node, error) {
	host, err := s.capacity.Capacity(ctx)
	if err != nil {
		return quota.Node{}, errs.Wrap(err, errs.KindUnavailable, "CAPACITY_UNAVAILABLE", "host capacity is unknown right now; try again")
	}
	capacity, err := quota.ClusterCapacity(host, s.overcommit)
	if err != nil {
		return quota.Node{}, err
	}
	used, err := budgetsExcept(ctx, q, excludeDept)
	return quota.Node{Level: quota.LevelCluster, Name: "cluster", Capacity: capacity, Used: used}, err
}

// LevelPool is the node-pool level of the hierarchy: a team's quota is
// carved from the nodes of its pool (the shared pool for SHARED teams, the
// team's own for DEDICATED ones), next to its department's budget.
const LevelPool quota.Level = "pool"

// PoolNode is the pool level for a team's quota: capacity = the pool's
// nodes x overcommit, used = the quotas of the pool's other teams. It locks
// the pool for the rest of the transaction, so two teams of different
// departments cannot both take its last free GPUs. ok is false when the
// capacity source does not know pools.
func (s *Service) PoolNode(ctx context.Context, tx *store.Tx, pool, excludeTeam string) (node quota.Node, ok bool, err error) {
	src, known := s.capacity.(PoolCapacitySource)
	if !known {
		return quota.Node{}, false, nil
	}
	pools, err := src.PoolCapacity(ctx)
	if err != nil {
		return quota.Node{}, false, errs.Wrap(err, errs.KindUnavailable, "CAPACITY_UNAVAILABLE", "host capacity is unknown right now; try again")
	}
	capacity, err := quota.ClusterCapacity(pools[pool], s.overcommit)
	if err != nil {
		return quota.Node{}, false, err
	}
	if err := lockPool(ctx, tx, pool); err != nil {
		return quota.Node{}, false, err
	}
	used, err := poolQuotasExcept(ctx, tx, pool, excludeTeam)
	return quota.Node{Level: LevelPool, Name: pool, Capacity: capacity, Used: used}, true, err
}

// FitError is quota.FitError, saying also how nodes join a pool that has
// none of a requested resource.
func FitError(field string, shortfalls []quota.Shortfall) error {
	err := quota.FitError(field, shortfalls)
	e, ok := errs.As(err)
	if !ok {
		return err
	}
	for _, sf := range shortfalls {
		if sf.Level == LevelPool && sf.CapacityRaw == 0 {
			e.Message += fmt.Sprintf("; node pool %q has no %s at all: nodes join it with the label gpuplane.io/pool=%s and the taint gpuplane.io/pool=%s:NoSchedule",
				sf.Name, sf.Resource, sf.Name, sf.Name)
			break
		}
	}
	return e
}

// DepartmentNode is the department level: capacity = budget, used = team quotas except excludeTeam.
// The caller must hold LockDepartment.
func DepartmentNode(ctx context.Context, q store.Querier, dept string, budget quota.Resources, excludeTeam string) (quota.Node, error) {
	used, err := assignedExcept(ctx, q, dept, excludeTeam)
	return quota.Node{Level: quota.LevelDepartment, Name: names.Department(dept), Capacity: budget, Used: used}, err
}

// TeamNode is the team level: capacity = team quota, used = quota-holding virtual clusters
// except excludeVC. The caller must hold the team's department lock.
func TeamNode(ctx context.Context, q store.Querier, team string, teamQuota quota.Resources, excludeVC string) (quota.Node, error) {
	used, err := virtualcluster.QuotaOfTeam(ctx, q, team, excludeVC)
	return quota.Node{Level: quota.LevelTeam, Name: names.Team(team), Capacity: teamQuota, Used: used}, err
}

// TeamNodeOf is TeamNode for a team whose virtual clusters (but the one
// being decided) hold used, already read (virtualcluster.QueueQuotaOfTeam).
func TeamNodeOf(team string, teamQuota, used quota.Resources) quota.Node {
	return quota.Node{Level: quota.LevelTeam, Name: names.Team(team), Capacity: teamQuota, Used: used}
}

// ChildrenOfTeam sums what the team's virtual clusters hold.
func ChildrenOfTeam(ctx context.Context, q store.Querier, team string) (quota.Resources, error) {
	return virtualcluster.QuotaOfTeam(ctx, q, team, "")
}

// BelowChildrenError refuses a parent smaller than what it already handed
// out; the message says what the children hold.
func BelowChildrenError(field, level, name string, newQuota, children quota.Resources) error {
	var v errs.Violations
	for k, want := range newQuota.All() {
		if have := children.Get(k); want < have {
			v.Add(field+"."+k.Field(), "%s %s would be below the %s its children already hold", level, k.Format(want), k.Format(have))
		}
	}
	if len(v) == 0 {
		return nil
	}
	e := errs.New(errs.KindFailedPrecondition, errs.ReasonQuotaExceeded,
		"%s %s cannot shrink below what is already assigned to its children; shrink those first", level, name)
	e.Violations = v
	return e.With("level", level).With("name", name)
}
