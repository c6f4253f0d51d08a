package tenancy

// The teams table: every statement on it is in this file.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

const teamColumns = `uid, id, department_id, display_name, isolation_tier, node_pool, gpu_centi, cpu_millis, memory_bytes, version, create_time, update_time,
	auto_sleep_after_seconds`

// poolConstraint is the unique index that keeps a dedicated node pool to
// one team (migration 4).
const poolConstraint = "teams_dedicated_node_pool"

func scanTeam(row pgx.Row) (Team, error) { return scanTeamWith(row) }

// scanTeamWith scans teamColumns and then more columns into more.
func scanTeamWith(row pgx.Row, more ...any) (Team, error) {
	var t Team
	var autoSleep int64
	err := row.Scan(append([]any{&t.UID, &t.ID, &t.Department, &t.DisplayName, &t.Tier, &t.Pool, &t.Quota.GPU, &t.Quota.CPUMillis,
		&t.Quota.MemoryBytes, &t.Version, &t.Created, &t.Updated, &autoSleep}, more...)...)
	t.AutoSleepAfter = time.Duration(autoSleep) * time.Second
	return t, err
}

// QueueGetTeam is GetTeam, queued in b (for Tx.Send).
func QueueGetTeam(b *store.Batch, dst *Team, id string, lock bool) {
	store.QueueOne(b, dst, `SELECT `+teamColumns+` FROM teams WHERE id = $1`, lock, scanTeam, errs.NotFound(names.Team(id)), id)
}

// queueGetTeamsLocked is QueueGetTeam (locked) for many teams in one
// statement: each is locked in the order of ids, and each one found is
// handed to found (ids not found are left out).
func queueGetTeamsLocked(b *store.Batch, ids []string, found func(Team)) {
	store.QueueEach(b, scanTeam, found, `SELECT t.* FROM unnest($1::text[]) WITH ORDINALITY AS u(id, n)
		CROSS JOIN LATERAL (SELECT `+teamColumns+` FROM teams WHERE id = u.id FOR UPDATE) t
		ORDER BY u.n`, ids)
}

// GetTeam reads a team; lock takes a row lock (in a Tx).
func GetTeam(ctx context.Context, q store.Querier, id string, lock bool) (Team, error) {
	return store.GetOne(ctx, q, `SELECT `+teamColumns+` FROM teams WHERE id = $1`, lock, scanTeam, errs.NotFound(names.Team(id)), id)
}

// insertTeamRow inserts a team; a batch of team creates inserts theirs in
// one statement (store.SetWrite).
var insertTeamRow = &store.SetWrite{
	One: `
		INSERT INTO teams (uid, id, department_id, display_name, isolation_tier, node_pool, gpu_centi, cpu_millis, memory_bytes,
		                   auto_sleep_after_seconds, version, create_time, update_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)`,
	Many: `
		INSERT INTO teams (uid, id, department_id, display_name, isolation_tier, node_pool, gpu_centi, cpu_millis, memory_bytes,
		                   auto_sleep_after_seconds, version, create_time, update_time)
		SELECT u.uid, u.id, u.dept, u.name, u.tier, u.pool, u.gpu, u.cpu, u.mem, u.sleep, u.version, u.created, u.created
		  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[],
		              $9::bigint[], $10::bigint[], $11::bigint[], $12::timestamptz[])
		       WITH ORDINALITY AS u(uid, id, dept, name, tier, pool, gpu, cpu, mem, sleep, version, created, n)
		 ORDER BY u.n`,
}

func insertTeam(ctx context.Context, tx *store.Tx, t Team) (Team, error) {
	// Every column is known here (uid and times included), so the insert
	// needs no answer and travels with the transaction's next round trip;
	// its failures come back from there, mapped as below.
	t.UID, t.Version = store.NewUID(), 1
	t.Created = store.Now()
	t.Updated = t.Created
	t.AutoSleepAfter = t.AutoSleepAfter.Truncate(time.Second) // stored in seconds
	tx.ExecDeferredSetMapped(insertTeamRow, func(err error) error { return insertTeamError(err, t) },
		t.UID, t.ID, t.Department, t.DisplayName, t.Tier, t.Pool, t.Quota.GPU, t.Quota.CPUMillis, t.Quota.MemoryBytes,
		int64(t.AutoSleepAfter/time.Second), t.Version, t.Created)
	return t, nil
}

func insertTeamError(err error, t Team) error {
	switch {
	case store.ConstraintName(err) == poolConstraint:
		return poolTaken("team.node_pool", t.Pool)
	case errs.KindOf(store.Classify(err)) == errs.KindAlreadyExists:
		return errs.AlreadyExists(names.Team(t.ID))
	case store.ConstraintName(err) == departmentConstraint:
		// Only a create that did not lock the department first (its team
		// takes no quota) gets here for a department that never existed.
		return errs.NotFound(names.Department(t.Department))
	}
	return err
}

// departmentConstraint is the teams -> departments foreign key
// (PostgreSQL's default name).
const departmentConstraint = "teams_department_id_fkey"

// updateTeamRow stores a team's settings; a batch of team changes stores
// theirs in one statement (store.SetWrite), one row per team.
var updateTeamRow = &store.SetWrite{
	One: `
		UPDATE teams SET display_name = $2, isolation_tier = $3, gpu_centi = $4, cpu_millis = $5, memory_bytes = $6,
		       node_pool = $7, auto_sleep_after_seconds = $8, version = $9, update_time = $10
		 WHERE id = $1`,
	Many: `
		UPDATE teams t SET display_name = u.name, isolation_tier = u.tier, gpu_centi = u.gpu, cpu_millis = u.cpu,
		       memory_bytes = u.mem, node_pool = u.pool, auto_sleep_after_seconds = u.sleep, version = u.version,
		       update_time = u.updated
		  FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::bigint[],
		              $9::bigint[], $10::timestamptz[])
		       AS u(id, name, tier, gpu, cpu, mem, pool, sleep, version, updated)
		 WHERE t.id = u.id`,
	Key: 1,
}

// updateTeamDeferred stores a team the transaction has locked (cur as
// read): next is stored as given, with the next version, and the write
// deferred (store.Tx.ExecDeferred).
func updateTeamDeferred(tx *store.Tx, cur, next Team) Team {
	next.Version, next.Updated = cur.Version+1, store.Now()
	next.AutoSleepAfter = next.AutoSleepAfter.Truncate(time.Second) // stored in seconds
	tx.ExecDeferredSetMapped(updateTeamRow, func(err error) error {
		if store.ConstraintName(err) == poolConstraint {
			return poolTaken("team.node_pool", next.Pool)
		}
		return err
	}, next.ID, next.DisplayName, next.Tier, next.Quota.GPU, next.Quota.CPUMillis, next.Quota.MemoryBytes, next.Pool,
		int64(next.AutoSleepAfter/time.Second), next.Version, next.Updated)
	return next
}

const poolLockPrefix = "gpuplane-pool:"

// lockPool serialises quota changes in one node pool until commit.
func lockPool(ctx context.Context, tx *store.Tx, pool string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, poolLockPrefix+pool)
	return err
}

// poolQuotasExcept sums the quotas of the pool's teams except excludeTeam.
func poolQuotasExcept(ctx context.Context, q store.Querier, pool, excludeTeam string) (quota.Resources, error) {
	return sumRow(ctx, q, `SELECT COALESCE(SUM(gpu_centi),0), COALESCE(SUM(cpu_millis),0), COALESCE(SUM(memory_bytes),0)
		FROM teams WHERE node_pool = $1 AND id <> $2`, pool, excludeTeam)
}

func setTeamQuota(ctx context.Context, tx *store.Tx, id string, q quota.Resources) (Team, error) {
	row, err := scanTeam(tx.QueryRow(ctx, `UPDATE teams SET gpu_centi = $2, cpu_millis = $3, memory_bytes = $4,
		version = version + 1, update_time = now() WHERE id = $1 RETURNING `+teamColumns, id, q.GPU, q.CPUMillis, q.MemoryBytes))
	if err != nil {
		return row, fmt.Errorf("update team quota: %w", err)
	}
	return row, nil
}

func deleteTeam(ctx context.Context, tx *store.Tx, id string) error {
	_, err := tx.Exec(ctx, `DELETE FROM teams WHERE id = $1`, id)
	return err
}

func countTeams(ctx context.Context, q store.Querier, dept string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM teams WHERE department_id = $1`, dept).Scan(&n)
	return n, err
}

var teamFilter = filter.Schema{
	"department":     {Column: "department_id", Type: filter.String, Strip: "departments/"},
	"isolation_tier": {Column: "isolation_tier", Type: filter.Enum, Enum: []string{string(TierShared), string(TierDedicated), string(TierSandbox)}},
	"display_name":   {Column: "display_name", Type: filter.String, Prefix: true},
}

// ListTeams returns a page of teams in scope (its teams, and teams of its
// departments), and whether more follow.
func ListTeams(ctx context.Context, q store.Querier, o ListOptions) ([]Team, bool, error) {
	lq, err := store.NewList(o.PageSize, o.Filter, teamFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("id > " + lq.Arg(o.After))
	if !o.Scope.All {
		lq.Where("id = ANY(" + lq.Arg(o.Scope.Teams) + ") OR department_id = ANY(" + lq.Arg(o.Scope.Departments) + ")")
	}
	return store.FetchPage(ctx, q, lq, `SELECT `+teamColumns+` FROM teams`, "id", scanTeam)
}

// TeamUsage is a team's quota and what KAI reports allocated in its
// quota-holding virtual clusters.
type TeamUsage struct {
	Team             string
	Quota, Allocated quota.Resources
}

// Usage reads every team's quota and allocation in one query (metrics).
func Usage(ctx context.Context, q store.Querier) ([]TeamUsage, error) {
	rows, err := q.Query(ctx, `
		SELECT t.id, t.gpu_centi, t.cpu_millis, t.memory_bytes,
		       COALESCE(SUM(v.alloc_gpu_centi), 0), COALESCE(SUM(v.alloc_cpu_millis), 0), COALESCE(SUM(v.alloc_memory_bytes), 0)
		  FROM teams t
		  LEFT JOIN virtual_clusters v ON v.team_id = t.id AND v.phase = ANY($1)
		 GROUP BY t.id`, virtualcluster.PhasesWhere(virtualcluster.Phase.HoldsQuota))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TeamUsage, error) {
		var u TeamUsage
		return u, r.Scan(&u.Team, &u.Quota.GPU, &u.Quota.CPUMillis, &u.Quota.MemoryBytes,
			&u.Allocated.GPU, &u.Allocated.CPUMillis, &u.Allocated.MemoryBytes)
	})
}
