package virtualcluster

// The virtual_clusters table: every statement on it is in this file.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
)

const columns = `id, team_id, display_name, gpu_centi, cpu_millis, memory_bytes,
	limit_gpu_centi, limit_cpu_millis, limit_memory_bytes, over_quota_weight, priority, allow_fractional_gpus,
	kubernetes_version, chart_version, expire_time, phase, conditions, generation, observed_generation,
	endpoint, status_message, alloc_gpu_centi, alloc_cpu_millis, alloc_memory_bytes, version, create_time, update_time`

// The phase sets of the rules in phase.go, as SQL array arguments.
var (
	holdsQuotaPhases = PhasesWhere(Phase.HoldsQuota)
	livePhases       = PhasesWhere(Phase.IsLive)
	gonePhases       = PhasesWhere(Phase.IsGone)
)

func scan(row pgx.Row) (VirtualCluster, error) {
	var v VirtualCluster
	var lg, lc, lm *int64
	var conds []byte
	s := &v.Spec
	err := row.Scan(&v.ID, &v.Team, &s.DisplayName, &s.Quota.GPU, &s.Quota.CPUMillis, &s.Quota.MemoryBytes,
		&lg, &lc, &lm, &s.OverQuotaWeight, &s.Priority, &s.AllowFractionalGPUs,
		&s.KubernetesVersion, &s.ChartVersion, &s.ExpireTime, &v.Phase, &conds, &v.Generation, &v.ObservedGeneration,
		&v.Endpoint, &v.StatusMessage, &v.Allocated.GPU, &v.Allocated.CPUMillis, &v.Allocated.MemoryBytes,
		&v.Version, &v.Created, &v.Updated)
	if err != nil {
		return v, err
	}
	if lg != nil && lc != nil && lm != nil {
		s.Limit = &quota.Resources{GPU: quota.GPU(*lg), CPUMillis: *lc, MemoryBytes: *lm}
	}
	v.Conditions, err = DecodeConditions(conds)
	return v, err
}

func limitColumns(l *quota.Resources) (g, c, m *int64) {
	if l == nil {
		return nil, nil, nil
	}
	gg, cc, mm := int64(l.GPU), l.CPUMillis, l.MemoryBytes
	return &gg, &cc, &mm
}

// Get reads a virtual cluster by id; lock takes a row lock (in a Tx).
func Get(ctx context.Context, q store.Querier, id string, lock bool) (VirtualCluster, error) {
	return store.GetOne(ctx, q, `SELECT `+columns+` FROM virtual_clusters WHERE id = $1`, lock, scan, errs.NotFound("virtual cluster "+id), id)
}

// InsertPending stores a requested virtual cluster in PENDING_APPROVAL. A
// name whose earlier virtual cluster is gone (rejected or deleted) may be
// used again; the old row is history (the audit log keeps it).
func InsertPending(ctx context.Context, tx *store.Tx, team, id string, spec Spec) (VirtualCluster, error) {
	if _, err := tx.Exec(ctx, `DELETE FROM virtual_clusters WHERE id = $1 AND phase = ANY($2)`, id, gonePhases); err != nil {
		return VirtualCluster{}, err
	}
	lg, lc, lm := limitColumns(spec.Limit)
	row, err := scan(tx.QueryRow(ctx, `
		INSERT INTO virtual_clusters (id, team_id, display_name, gpu_centi, cpu_millis, memory_bytes,
		       limit_gpu_centi, limit_cpu_millis, limit_memory_bytes, over_quota_weight, priority,
		       allow_fractional_gpus, kubernetes_version, chart_version, expire_time, phase)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) RETURNING `+columns,
		id, team, spec.DisplayName, spec.Quota.GPU, spec.Quota.CPUMillis, spec.Quota.MemoryBytes, lg, lc, lm,
		spec.OverQuotaWeight, spec.Priority, spec.AllowFractionalGPUs, spec.KubernetesVersion,
		spec.ChartVersion, spec.ExpireTime, PhasePendingApproval))
	if store.SQLState(err) == "23505" {
		return row, errs.New(errs.KindAlreadyExists, errs.ReasonAlreadyExists,
			"virtual cluster name %q is taken (names are unique across all teams: they name KAI queues)", id).With("virtual_cluster_id", id)
	}
	return row, err
}

// Versions are the vCluster chart and virtual Kubernetes versions a
// virtual cluster runs.
type Versions struct {
	Chart, Kubernetes string
}

// Move sets phase, quota, limit and versions, clears the status message
// and, when bump is set, raises the generation (the desired state changed).
func Move(ctx context.Context, tx *store.Tx, id string, phase Phase, q quota.Resources, limit *quota.Resources, v Versions, bump bool) (VirtualCluster, error) {
	lg, lc, lm := limitColumns(limit)
	inc := 0
	if bump {
		inc = 1
	}
	return scan(tx.QueryRow(ctx, `
		UPDATE virtual_clusters SET phase = $2, gpu_centi = $3, cpu_millis = $4, memory_bytes = $5,
		       limit_gpu_centi = $6, limit_cpu_millis = $7, limit_memory_bytes = $8,
		       chart_version = $10, kubernetes_version = $11,
		       generation = generation + $9, status_message = '', version = version + 1, update_time = now()
		 WHERE id = $1 RETURNING `+columns,
		id, phase, q.GPU, q.CPUMillis, q.MemoryBytes, lg, lc, lm, inc, v.Chart, v.Kubernetes))
}

// RejectPending marks a virtual cluster still waiting for approval
// REJECTED (its request was rejected or cancelled).
func RejectPending(ctx context.Context, tx *store.Tx, id, message string) (VirtualCluster, bool, error) {
	row, err := scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET phase = $3, status_message = $2,
		version = version + 1, update_time = now() WHERE id = $1 AND phase = $4 RETURNING `+columns,
		id, message, PhaseRejected, PhasePendingApproval))
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false, nil
	}
	return row, err == nil, err
}

// Status is what the worker writes back.
type Status struct {
	Phase              Phase
	Conditions         []Condition
	ObservedGeneration int64
	Message            string
	Allocated          quota.Resources
	Endpoint           string
}

// WriteStatus stores the worker's observation and returns the new row.
func WriteStatus(ctx context.Context, tx *store.Tx, id string, st Status) (VirtualCluster, error) {
	raw, err := EncodeConditions(st.Conditions)
	if err != nil {
		return VirtualCluster{}, err
	}
	return scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET phase = $2, conditions = $3, observed_generation = $4,
		status_message = $5, alloc_gpu_centi = $6, alloc_cpu_millis = $7, alloc_memory_bytes = $8, endpoint = $9,
		version = version + 1, update_time = now() WHERE id = $1 RETURNING `+columns,
		id, st.Phase, raw, st.ObservedGeneration, st.Message, st.Allocated.GPU, st.Allocated.CPUMillis,
		st.Allocated.MemoryBytes, st.Endpoint))
}

// SetPhase changes phase and status message only (the worker giving up).
func SetPhase(ctx context.Context, tx *store.Tx, id string, phase Phase, message string) (VirtualCluster, error) {
	return scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET phase = $2, status_message = $3,
		version = version + 1, update_time = now() WHERE id = $1 RETURNING `+columns, id, phase, message))
}

// MarkDeleted records that nothing is left on the host.
func MarkDeleted(ctx context.Context, tx *store.Tx, id string) (VirtualCluster, error) {
	return scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET phase = $2, observed_generation = generation,
		conditions = '[]', status_message = '', endpoint = '', alloc_gpu_centi = 0, alloc_cpu_millis = 0,
		alloc_memory_bytes = 0, version = version + 1, update_time = now() WHERE id = $1 RETURNING `+columns, id, PhaseDeleted))
}

func sum(ctx context.Context, q store.Querier, sql string, args ...any) (quota.Resources, error) {
	var r quota.Resources
	err := q.QueryRow(ctx, sql, args...).Scan(&r.GPU, &r.CPUMillis, &r.MemoryBytes)
	return r, err
}

// QuotaOfTeam sums the quotas of the team's virtual clusters that hold
// quota, except excludeVC ("" excludes none).
func QuotaOfTeam(ctx context.Context, q store.Querier, team, excludeVC string) (quota.Resources, error) {
	return sum(ctx, q, `SELECT COALESCE(SUM(gpu_centi),0), COALESCE(SUM(cpu_millis),0), COALESCE(SUM(memory_bytes),0)
		FROM virtual_clusters WHERE team_id = $1 AND id <> $2 AND phase = ANY($3)`, team, excludeVC, holdsQuotaPhases)
}

// AllocatedToTeam sums what KAI reports allocated in the team's queues.
func AllocatedToTeam(ctx context.Context, q store.Querier, team string) (quota.Resources, error) {
	return sum(ctx, q, `SELECT COALESCE(SUM(alloc_gpu_centi),0), COALESCE(SUM(alloc_cpu_millis),0), COALESCE(SUM(alloc_memory_bytes),0)
		FROM virtual_clusters WHERE team_id = $1 AND phase = ANY($2)`, team, holdsQuotaPhases)
}

// CountFractional counts the team's quota-holding virtual clusters that use
// (or may use) fractional GPUs.
func CountFractional(ctx context.Context, q store.Querier, team string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM virtual_clusters WHERE team_id = $1
		AND (allow_fractional_gpus OR gpu_centi % 100 <> 0) AND phase = ANY($2)`, team, holdsQuotaPhases).Scan(&n)
	return n, err
}

// CountNotGone counts the team's virtual clusters that are not gone.
func CountNotGone(ctx context.Context, q store.Querier, team string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM virtual_clusters WHERE team_id = $1 AND NOT (phase = ANY($2))`, team, gonePhases).Scan(&n)
	return n, err
}

// DeleteOfTeam removes a team's (gone) virtual clusters with the team.
func DeleteOfTeam(ctx context.Context, tx *store.Tx, team string) error {
	_, err := tx.Exec(ctx, `DELETE FROM virtual_clusters WHERE team_id = $1`, team)
	return err
}

// NextExpired returns a live virtual cluster whose expire_time is at or
// before now (the earliest), or found=false.
func NextExpired(ctx context.Context, tx *store.Tx, now time.Time) (id, team string, found bool, err error) {
	err = tx.QueryRow(ctx, `SELECT id, team_id FROM virtual_clusters
		 WHERE expire_time IS NOT NULL AND expire_time <= $1 AND phase = ANY($2)
		 ORDER BY expire_time LIMIT 1`, now, livePhases).Scan(&id, &team)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	return id, team, err == nil, err
}

var listFilter = filter.Schema{
	"phase": {Column: "phase", Type: filter.Enum, Enum: PhasesWhere(Phase.Valid)},
}

// ListOptions select one page of a list.
type ListOptions struct {
	PageSize int32
	Filter   string
	After    string // last id of the previous page
	// Team limits the list to one team; otherwise Scope applies (teams it
	// names, and teams of the departments it names).
	Team  string
	Scope store.Scope
}

// List returns a page of virtual clusters by id, and whether more follow.
func List(ctx context.Context, q store.Querier, o ListOptions) ([]VirtualCluster, bool, error) {
	lq, err := store.NewList(o.PageSize, o.Filter, listFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("id > " + lq.Arg(o.After))
	switch {
	case o.Team != "":
		lq.Where("team_id = " + lq.Arg(o.Team))
	case !o.Scope.All:
		lq.Where("team_id = ANY(" + lq.Arg(o.Scope.Teams) + ") OR team_id IN (SELECT id FROM teams WHERE department_id = ANY(" + lq.Arg(o.Scope.Departments) + "))")
	}
	return store.FetchPage(ctx, q, lq, `SELECT `+columns+` FROM virtual_clusters`, "id", scan)
}

// CheckList validates a list's page size and filter without running it.
func CheckList(o ListOptions) error {
	_, err := store.NewList(o.PageSize, o.Filter, listFilter)
	return err
}

// CountByPhase counts virtual clusters per phase (metrics).
func CountByPhase(ctx context.Context, q store.Querier) (map[string]int64, error) {
	return store.CountBy(ctx, q, `SELECT phase, count(*) FROM virtual_clusters GROUP BY phase`)
}
