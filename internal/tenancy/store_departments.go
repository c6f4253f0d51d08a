package tenancy

// The departments table: every statement on it is in this file.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
)

const departmentColumns = `uid, id, display_name, gpu_centi, cpu_millis, memory_bytes, admin_groups, requester_cannot_decide, version, create_time, update_time,
	sleeping_keeps_quota`

func scanDepartment(row pgx.Row) (Department, error) {
	var d Department
	err := row.Scan(&d.UID, &d.ID, &d.DisplayName, &d.Budget.GPU, &d.Budget.CPUMillis, &d.Budget.MemoryBytes,
		&d.AdminGroups, &d.RequesterCannotDecide, &d.Version, &d.Created, &d.Updated, &d.SleepingKeepsQuota)
	return d, err
}

// GetDepartment reads a department; lock takes a row lock (in a Tx).
func GetDepartment(ctx context.Context, q store.Querier, id string, lock bool) (Department, error) {
	return store.GetOne(ctx, q, `SELECT `+departmentColumns+` FROM departments WHERE id = $1`, lock, scanDepartment,
		errs.NotFound(names.Department(id)), id)
}

// Budget reads a department's budget; lock takes the department lock
// every change below the department holds first (lock order: department,
// then request, then virtual cluster), so hierarchy checks stay true until
// commit.
func Budget(ctx context.Context, q store.Querier, dept string, lock bool) (quota.Resources, error) {
	return store.GetOne(ctx, q, `SELECT gpu_centi, cpu_millis, memory_bytes FROM departments WHERE id = $1`, lock,
		scanBudget, errs.NotFound(names.Department(dept)), dept)
}

// LockDepartment locks the department row and returns its budget. The lock
// is FOR NO KEY UPDATE: it serialises the changes that take or move quota,
// but not the creation of teams without quota, whose foreign key check
// only needs the row to stay (FOR KEY SHARE); deleting the department
// (FOR UPDATE) still waits for both.
func LockDepartment(ctx context.Context, tx *store.Tx, dept string) (quota.Resources, error) {
	return store.GetOne(ctx, tx, lockDepartmentSQL, false, scanBudget, errs.NotFound(names.Department(dept)), dept)
}

// QueueLockDepartment is LockDepartment, queued in b (for Tx.Send), the
// budget going to *budget.
func QueueLockDepartment(b *store.Batch, budget *quota.Resources, dept string) {
	store.QueueOne(b, budget, lockDepartmentSQL, false, scanBudget, errs.NotFound(names.Department(dept)), dept)
}

const lockDepartmentSQL = `SELECT gpu_centi, cpu_millis, memory_bytes FROM departments WHERE id = $1 FOR NO KEY UPDATE`

func scanBudget(row pgx.Row) (quota.Resources, error) {
	var r quota.Resources
	return r, row.Scan(&r.GPU, &r.CPUMillis, &r.MemoryBytes)
}

// DepartmentGroup is the store.DB.InGroupTx key of changes that lock
// department dept (LockDepartment): they would run one at a time anyway,
// so they share transactions, the lock and the commit's flush.
func DepartmentGroup(dept string) string { return "department/" + dept }

const clusterLockKey = 7_300_001

// LockCluster serialises changes to department budgets.
func LockCluster(ctx context.Context, tx *store.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, clusterLockKey)
	return err
}

func sumRow(ctx context.Context, q store.Querier, sql string, args ...any) (quota.Resources, error) {
	var r quota.Resources
	err := q.QueryRow(ctx, sql, args...).Scan(&r.GPU, &r.CPUMillis, &r.MemoryBytes)
	return r, err
}

func budgetsExcept(ctx context.Context, q store.Querier, excludeDept string) (quota.Resources, error) {
	return sumRow(ctx, q, `SELECT COALESCE(SUM(gpu_centi),0), COALESCE(SUM(cpu_millis),0), COALESCE(SUM(memory_bytes),0)
		FROM departments WHERE id <> $1`, excludeDept)
}

// assignedExcept: what the department's teams hold except excludeTeam.
// assigned_* is kept by a trigger on teams (migration 3): one row read,
// whatever the size of the department.
func assignedExcept(ctx context.Context, q store.Querier, dept, excludeTeam string) (quota.Resources, error) {
	return sumRow(ctx, q, assignedExceptSQL, dept, excludeTeam)
}

const assignedExceptSQL = `
		SELECT d.assigned_gpu_centi - COALESCE(t.gpu_centi, 0),
		       d.assigned_cpu_millis - COALESCE(t.cpu_millis, 0),
		       d.assigned_memory_bytes - COALESCE(t.memory_bytes, 0)
		  FROM departments d LEFT JOIN teams t ON t.id = $2 AND t.department_id = d.id
		 WHERE d.id = $1`

// queueAssigned queues the read of what all the department's teams are
// assigned (zero for a department not found).
func queueAssigned(b *store.Batch, dst *quota.Resources, dept string) {
	store.QueueOne(b, dst, `SELECT assigned_gpu_centi, assigned_cpu_millis, assigned_memory_bytes FROM departments WHERE id = $1`,
		false, scanBudget, nil, dept)
}

// queueAssignedExcept is assignedExcept, queued in b (for Tx.Send).
func queueAssignedExcept(b *store.Batch, dst *quota.Resources, dept, excludeTeam string) {
	store.QueueOne(b, dst, assignedExceptSQL, false, scanBudget, nil, dept, excludeTeam)
}

// ChildrenOfDepartment sums what the department's teams hold, to refuse
// shrinking the budget below it.
func ChildrenOfDepartment(ctx context.Context, q store.Querier, dept string) (quota.Resources, error) {
	return sumRow(ctx, q, `SELECT assigned_gpu_centi, assigned_cpu_millis, assigned_memory_bytes
		FROM departments WHERE id = $1`, dept)
}

// adminGroups is never NULL in the table: no groups is an empty array.
func adminGroups(d Department) []string {
	if d.AdminGroups == nil {
		return []string{}
	}
	return d.AdminGroups
}

func insertDepartment(ctx context.Context, tx *store.Tx, d Department) (Department, error) {
	row, err := scanDepartment(tx.QueryRow(ctx, `
		INSERT INTO departments (id, display_name, gpu_centi, cpu_millis, memory_bytes, admin_groups, requester_cannot_decide, sleeping_keeps_quota)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+departmentColumns,
		d.ID, d.DisplayName, d.Budget.GPU, d.Budget.CPUMillis, d.Budget.MemoryBytes, adminGroups(d), d.RequesterCannotDecide, d.SleepingKeepsQuota))
	if err != nil && errs.KindOf(store.Classify(err)) == errs.KindAlreadyExists {
		return row, errs.AlreadyExists(names.Department(d.ID))
	}
	return row, err
}

func updateDepartment(ctx context.Context, tx *store.Tx, d Department) (Department, error) {
	return scanDepartment(tx.QueryRow(ctx, `
		UPDATE departments SET display_name = $2, gpu_centi = $3, cpu_millis = $4, memory_bytes = $5,
		       admin_groups = $6, requester_cannot_decide = $7, sleeping_keeps_quota = $8, version = version + 1, update_time = now()
		 WHERE id = $1 RETURNING `+departmentColumns,
		d.ID, d.DisplayName, d.Budget.GPU, d.Budget.CPUMillis, d.Budget.MemoryBytes, adminGroups(d), d.RequesterCannotDecide, d.SleepingKeepsQuota))
}

func deleteDepartment(ctx context.Context, tx *store.Tx, id string) error {
	_, err := tx.Exec(ctx, `DELETE FROM departments WHERE id = $1`, id)
	return err
}

var departmentFilter = filter.Schema{
	"display_name": {Column: "display_name", Type: filter.String, Prefix: true},
}

// ListOptions select one page of a list ordered by id.
type ListOptions struct {
	PageSize int32
	Filter   string
	After    string // last id of the previous page
	Scope    store.Scope
}

// ListDepartments returns a page of departments in Scope.Departments (all
// with Scope.All), and whether more follow.
func ListDepartments(ctx context.Context, q store.Querier, o ListOptions) ([]Department, bool, error) {
	lq, err := store.NewList(o.PageSize, o.Filter, departmentFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("id > " + lq.Arg(o.After))
	if !o.Scope.All {
		lq.Where("id = ANY(" + lq.Arg(o.Scope.Departments) + ")")
	}
	return store.FetchPage(ctx, q, lq, `SELECT `+departmentColumns+` FROM departments`, "id", scanDepartment)
}
