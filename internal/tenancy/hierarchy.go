package tenancy

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
)

// The quota hierarchy (cluster -> department budget -> team quota ->
// virtual-cluster quota) is checked here and only here, inside the
// transaction that makes the change. Concurrency: every change below a
// department first locks that department's row (FOR UPDATE), and changes
// to department budgets take a cluster-wide advisory lock, so two changes
// that each fit alone but not together are serialised and the second one
// sees the first.

// activePhases hold quota: approved and not yet gone.
const activeVCPhases = `phase NOT IN ('PENDING_APPROVAL', 'REJECTED', 'DELETED')`

const clusterLockKey = 7_300_001

// LockCluster serialises changes to department budgets.
func LockCluster(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, clusterLockKey)
	return err
}

// LockDepartment locks the department row and returns its budget.
func LockDepartment(ctx context.Context, tx pgx.Tx, dept string) (quota.Resources, error) {
	var r quota.Resources
	err := tx.QueryRow(ctx, `SELECT gpu_centi, cpu_millis, memory_bytes FROM departments WHERE id = $1 FOR UPDATE`, dept).
		Scan(&r.GPU, &r.CPUMillis, &r.MemoryBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errs.NotFound(names.Department(dept))
	}
	return r, err
}

func sumRow(ctx context.Context, tx pgx.Tx, sql string, args ...any) (quota.Resources, error) {
	var r quota.Resources
	err := tx.QueryRow(ctx, sql, args...).Scan(&r.GPU, &r.CPUMillis, &r.MemoryBytes)
	return r, err
}

// ClusterNode is the cluster level: capacity x overcommit, used = the sum of
// all department budgets except excludeDept.
func (s *Service) ClusterNode(ctx context.Context, tx pgx.Tx, excludeDept string) (quota.Node, error) {
	host, err := s.Capacity.Capacity(ctx)
	if err != nil {
		return quota.Node{}, errs.Wrap(err, errs.KindUnavailable, "CAPACITY_UNAVAILABLE", "host capacity is unknown right now; try again")
	}
	capacity, err := quota.ClusterCapacity(host, s.Overcommit)
	if err != nil {
		return quota.Node{}, err
	}
	used, err := sumRow(ctx, tx, `SELECT COALESCE(SUM(gpu_centi),0), COALESCE(SUM(cpu_millis),0), COALESCE(SUM(memory_bytes),0)
		FROM departments WHERE id <> $1`, excludeDept)
	return quota.Node{Level: quota.LevelCluster, Name: "cluster", Capacity: capacity, Used: used}, err
}

// LevelPool is the node-pool level of the hierarchy: a team's quota is
// carved from the nodes of its pool (the shared pool for SHARED teams, the
// team's own for DEDICATED ones), next to its department's budget.
const LevelPool quota.Level = "pool"

// PoolCapacitySource is a CapacitySource that also knows the capacity of
// each node pool. Without one (static capacity from configuration) the
// pool level is not checked: nothing says which nodes belong to which pool.
type PoolCapacitySource interface {
	CapacitySource
	PoolCapacity(ctx context.Context) (map[string]quota.Resources, error)
}

// StaticPoolCapacity is a fixed capacity per node pool.
type StaticPoolCapacity map[string]quota.Resources

func (s StaticPoolCapacity) Capacity(context.Context) (quota.Resources, error) {
	var total quota.Resources
	for _, r := range s {
		total = total.Add(r)
	}
	return total, nil
}

func (s StaticPoolCapacity) PoolCapacity(context.Context) (map[string]quota.Resources, error) {
	return s, nil
}

const poolLockPrefix = "gpuplane-pool:"

// PoolNode is the pool level for a team's quota: capacity = the pool's
// nodes x overcommit, used = the quotas of the pool's other teams. It locks
// the pool for the rest of the transaction, so two teams of different
// departments cannot both take its last free GPUs. ok is false when the
// capacity source does not know pools.
func (s *Service) PoolNode(ctx context.Context, tx pgx.Tx, pool, excludeTeam string) (node quota.Node, ok bool, err error) {
	src, known := s.Capacity.(PoolCapacitySource)
	if !known {
		return quota.Node{}, false, nil
	}
	pools, err := src.PoolCapacity(ctx)
	if err != nil {
		return quota.Node{}, false, errs.Wrap(err, errs.KindUnavailable, "CAPACITY_UNAVAILABLE", "host capacity is unknown right now; try again")
	}
	capacity, err := quota.ClusterCapacity(pools[pool], s.Overcommit)
	if err != nil {
		return quota.Node{}, false, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, poolLockPrefix+pool); err != nil {
		return quota.Node{}, false, err
	}
	used, err := sumRow(ctx, tx, `SELECT COALESCE(SUM(gpu_centi),0), COALESCE(SUM(cpu_millis),0), COALESCE(SUM(memory_bytes),0)
		FROM teams WHERE node_pool = $1 AND id <> $2`, pool, excludeTeam)
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

// DepartmentNode: capacity = budget, used = team quotas except excludeTeam.
// The caller must hold LockDepartment.
func DepartmentNode(ctx context.Context, tx pgx.Tx, dept string, budget quota.Resources, excludeTeam string) (quota.Node, error) {
	// assigned_* is kept by a trigger on teams (migration 3): one row read,
	// whatever the size of the department.
	used, err := sumRow(ctx, tx, `
		SELECT d.assigned_gpu_centi - COALESCE(t.gpu_centi, 0),
		       d.assigned_cpu_millis - COALESCE(t.cpu_millis, 0),
		       d.assigned_memory_bytes - COALESCE(t.memory_bytes, 0)
		  FROM departments d LEFT JOIN teams t ON t.id = $2 AND t.department_id = d.id
		 WHERE d.id = $1`, dept, excludeTeam)
	return quota.Node{Level: quota.LevelDepartment, Name: names.Department(dept), Capacity: budget, Used: used}, err
}

// TeamNode: capacity = team quota, used = active virtual-cluster quotas
// except excludeVC. The caller must hold the team's department lock.
func TeamNode(ctx context.Context, tx pgx.Tx, team string, teamQuota quota.Resources, excludeVC string) (quota.Node, error) {
	used, err := sumRow(ctx, tx, `SELECT COALESCE(SUM(gpu_centi),0), COALESCE(SUM(cpu_millis),0), COALESCE(SUM(memory_bytes),0)
		FROM virtual_clusters WHERE team_id = $1 AND id <> $2 AND `+activeVCPhases, team, excludeVC)
	return quota.Node{Level: quota.LevelTeam, Name: names.Team(team), Capacity: teamQuota, Used: used}, err
}

// ChildrenTotal sums what children of a level hold, to refuse shrinking a
// parent below its children ("department budget below its teams' quotas").
func ChildrenOfDepartment(ctx context.Context, tx pgx.Tx, dept string) (quota.Resources, error) {
	return sumRow(ctx, tx, `SELECT assigned_gpu_centi, assigned_cpu_millis, assigned_memory_bytes
		FROM departments WHERE id = $1`, dept)
}

func ChildrenOfTeam(ctx context.Context, tx pgx.Tx, team string) (quota.Resources, error) {
	return sumRow(ctx, tx, `SELECT COALESCE(SUM(gpu_centi),0), COALESCE(SUM(cpu_millis),0), COALESCE(SUM(memory_bytes),0)
		FROM virtual_clusters WHERE team_id = $1 AND `+activeVCPhases, team)
}

// AllocatedToTeam sums what KAI reports allocated in the team's queues.
func AllocatedToTeam(ctx context.Context, tx pgx.Tx, team string) (quota.Resources, error) {
	return sumRow(ctx, tx, `SELECT COALESCE(SUM(alloc_gpu_centi),0), COALESCE(SUM(alloc_cpu_millis),0), COALESCE(SUM(alloc_memory_bytes),0)
		FROM virtual_clusters WHERE team_id = $1 AND `+activeVCPhases, team)
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
