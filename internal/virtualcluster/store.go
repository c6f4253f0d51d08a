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

const columns = `uid, id, team_id, display_name, gpu_centi, cpu_millis, memory_bytes,
	limit_gpu_centi, limit_cpu_millis, limit_memory_bytes, over_quota_weight, priority, allow_fractional_gpus,
	kubernetes_version, chart_version, expire_time, phase, conditions, generation, observed_generation,
	endpoint, status_message, alloc_gpu_centi, alloc_cpu_millis, alloc_memory_bytes, version, create_time, update_time,
	COALESCE(host_cluster_id, ''), placement_host_cluster, placement_labels, sleep`

// The phase sets of the rules in phase.go, as SQL array arguments.
var (
	holdsQuotaPhases = PhasesWhere(Phase.HoldsQuota)
	livePhases       = PhasesWhere(Phase.IsLive)
	gonePhases       = PhasesWhere(Phase.IsGone)
)

// GonePhases are the phases of a virtual cluster that is gone, as an SQL
// array argument (audit finds a virtual cluster's current incarnation).
var GonePhases = gonePhases

func scan(row pgx.Row) (VirtualCluster, error) {
	var v VirtualCluster
	var lg, lc, lm *int64
	var conds []byte
	s := &v.Spec
	err := row.Scan(&v.UID, &v.ID, &v.Team, &s.DisplayName, &s.Quota.GPU, &s.Quota.CPUMillis, &s.Quota.MemoryBytes,
		&lg, &lc, &lm, &s.OverQuotaWeight, &s.Priority, &s.AllowFractionalGPUs,
		&s.KubernetesVersion, &s.ChartVersion, &s.ExpireTime, &v.Phase, &conds, &v.Generation, &v.ObservedGeneration,
		&v.Endpoint, &v.StatusMessage, &v.Allocated.GPU, &v.Allocated.CPUMillis, &v.Allocated.MemoryBytes,
		&v.Version, &v.Created, &v.Updated, &v.HostCluster, &s.Placement.HostCluster, &s.Placement.Labels, &s.Sleep)
	if err != nil {
		return v, err
	}
	if len(s.Placement.Labels) == 0 {
		s.Placement.Labels = nil
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

// An id names several rows once it has been used again: at most one that
// is not gone (a unique index, migration 6) and the gone ones before it,
// each with its team. The current incarnation of an id is the one that is
// not gone, else the newest gone one; the single-row statements below all
// address it, so the history of other incarnations (other teams' rows
// included) is never changed.
const currentOrder = ` ORDER BY phase = ANY($2), create_time DESC, uid LIMIT 1`

// currentUID is a subquery for the current incarnation of id $1 ($2 is
// gonePhases).
const currentUID = `(SELECT uid FROM virtual_clusters WHERE id = $1` + currentOrder + `)`

// Get reads the current incarnation of a virtual cluster id; lock takes a
// row lock (in a Tx).
func Get(ctx context.Context, q store.Querier, id string, lock bool) (VirtualCluster, error) {
	return store.GetOne(ctx, q, `SELECT `+columns+` FROM virtual_clusters WHERE id = $1`+currentOrder, lock, scan,
		errs.NotFound("virtual cluster "+id), id, gonePhases)
}

// QueueGet is Get, queued in b (for Tx.Send).
func QueueGet(b *store.Batch, dst *VirtualCluster, id string, lock bool) {
	store.QueueOne(b, dst, `SELECT `+columns+` FROM virtual_clusters WHERE id = $1`+currentOrder, lock, scan,
		errs.NotFound("virtual cluster "+id), id, gonePhases)
}

// QueueGetLocked is QueueGet (locked) for many virtual clusters in one
// statement: the current incarnation of each of ids, locked in that
// order; each one found is handed to found (ids not found are left out).
func QueueGetLocked(b *store.Batch, ids []string, found func(VirtualCluster)) {
	store.QueueEach(b, scan, found, `SELECT v.* FROM unnest($1::text[]) WITH ORDINALITY AS u(id, n)
		CROSS JOIN LATERAL (SELECT `+columns+` FROM virtual_clusters WHERE id = u.id
		                     ORDER BY phase = ANY($2), create_time DESC, uid LIMIT 1 FOR UPDATE) v
		ORDER BY u.n`, ids, gonePhases)
}

// GetOfTeam reads a team's virtual cluster by id: its newest incarnation
// in that team. Another team may have taken the id since (after this one
// was rejected or deleted); this one is still the team's to read.
func GetOfTeam(ctx context.Context, q store.Querier, team, id string) (VirtualCluster, error) {
	return store.GetOne(ctx, q, `SELECT `+columns+` FROM virtual_clusters WHERE id = $1 AND team_id = $3`+currentOrder, false, scan,
		errs.NotFound("virtual cluster "+id), id, gonePhases, team)
}

// insertPendingRow inserts a virtual cluster waiting for approval; a batch
// of request creates inserts theirs in one statement (store.SetWrite).
var insertPendingRow = &store.SetWrite{
	One: `
		INSERT INTO virtual_clusters (uid, id, team_id, display_name, gpu_centi, cpu_millis, memory_bytes,
		       limit_gpu_centi, limit_cpu_millis, limit_memory_bytes, over_quota_weight, priority,
		       allow_fractional_gpus, kubernetes_version, chart_version, expire_time, phase,
		       placement_host_cluster, placement_labels, create_time, update_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $20)`,
	Many: `
		INSERT INTO virtual_clusters (uid, id, team_id, display_name, gpu_centi, cpu_millis, memory_bytes,
		       limit_gpu_centi, limit_cpu_millis, limit_memory_bytes, over_quota_weight, priority,
		       allow_fractional_gpus, kubernetes_version, chart_version, expire_time, phase,
		       placement_host_cluster, placement_labels, create_time, update_time)
		SELECT u.uid, u.id, u.team, u.name, u.gpu, u.cpu, u.mem, u.lim_gpu, u.lim_cpu, u.lim_mem, u.weight, u.priority,
		       u.fractional, u.kube, u.chart, u.expire, u.phase, u.host, u.labels, u.created, u.created
		  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[],
		              $9::bigint[], $10::bigint[], $11::integer[], $12::integer[], $13::boolean[], $14::text[], $15::text[],
		              $16::timestamptz[], $17::text[], $18::text[], $19::jsonb[], $20::timestamptz[])
		       WITH ORDINALITY AS u(uid, id, team, name, gpu, cpu, mem, lim_gpu, lim_cpu, lim_mem, weight, priority,
		                            fractional, kube, chart, expire, phase, host, labels, created, n)
		 ORDER BY u.n`,
}

// InsertPending stores a requested virtual cluster in PENDING_APPROVAL, as
// a new incarnation (uid). A name whose earlier virtual cluster is gone
// (rejected or deleted) may be used again, by any team; the old row stays,
// with its team, untouched.
func InsertPending(ctx context.Context, tx *store.Tx, team, id string, spec Spec) (VirtualCluster, error) {
	// Every column is known here, so the insert needs no answer and is
	// deferred (store.Tx.ExecDeferred); the row is the one stored, with the
	// values PostgreSQL would give it (timestamps to the microsecond).
	now := store.Now()
	if spec.ExpireTime != nil {
		t := spec.ExpireTime.UTC().Truncate(time.Microsecond)
		spec.ExpireTime = &t
	}
	if len(spec.Placement.Labels) == 0 {
		spec.Placement.Labels = nil
	}
	spec.Sleep = false
	vc := VirtualCluster{UID: store.NewUID(), ID: id, Team: team, Spec: spec, Phase: PhasePendingApproval,
		Conditions: []Condition{}, Generation: 1, Version: 1, Created: now, Updated: now}
	lg, lc, lm := limitColumns(spec.Limit)
	labels := spec.Placement.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	tx.ExecDeferredSetMapped(insertPendingRow, func(err error) error {
		if store.SQLState(err) == "23505" {
			return errs.New(errs.KindAlreadyExists, errs.ReasonAlreadyExists,
				"virtual cluster name %q is taken (names are unique across all teams: they name KAI queues)", id).With("virtual_cluster_id", id)
		}
		return err
	}, vc.UID, id, team, spec.DisplayName, spec.Quota.GPU, spec.Quota.CPUMillis, spec.Quota.MemoryBytes, lg, lc, lm,
		spec.OverQuotaWeight, spec.Priority, spec.AllowFractionalGPUs, spec.KubernetesVersion,
		spec.ChartVersion, spec.ExpireTime, PhasePendingApproval, spec.Placement.HostCluster, labels, now)
	return vc, nil
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
		UPDATE virtual_clusters SET phase = $3, gpu_centi = $4, cpu_millis = $5, memory_bytes = $6,
		       limit_gpu_centi = $7, limit_cpu_millis = $8, limit_memory_bytes = $9,
		       chart_version = $11, kubernetes_version = $12,
		       generation = generation + $10, status_message = '', version = version + 1, update_time = now()
		 WHERE uid = `+currentUID+` RETURNING `+columns,
		id, gonePhases, phase, q.GPU, q.CPUMillis, q.MemoryBytes, lg, lc, lm, inc, v.Chart, v.Kubernetes))
}

// SetSleep changes whether the virtual cluster should be asleep, bumps
// the generation and moves the phase (SLEEPING -> PROVISIONING on wake;
// the worker sets SLEEPING once the host shows it asleep). The caller has
// checked the phase and locked the row.
func SetSleep(ctx context.Context, tx *store.Tx, id string, sleep bool, phase Phase) (VirtualCluster, error) {
	return scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET sleep = $3, phase = $4, generation = generation + 1,
		status_message = '', active_time = now(), version = version + 1, update_time = now() WHERE uid = `+currentUID+` RETURNING `+columns,
		id, gonePhases, sleep, phase))
}

// Touch records API activity about a virtual cluster (a kubeconfig handed
// out): it is not idle. It does not change version (no etag moves).
func Touch(ctx context.Context, q store.Querier, id string) error {
	_, err := q.Exec(ctx, `UPDATE virtual_clusters SET active_time = now() WHERE uid = `+currentUID, id, gonePhases)
	return err
}

// IdleSince reports whether a virtual cluster is idle for auto-sleep at
// now: its team sleeps idle virtual clusters, it is awake and READY or
// DEGRADED, no GPU is allocated in its leaf queue and nothing used it for
// the team's auto_sleep_after.
const idleCondition = `t.auto_sleep_after_seconds > 0 AND NOT v.sleep AND v.phase = ANY($2) AND v.alloc_gpu_centi = 0
	AND v.active_time + make_interval(secs => t.auto_sleep_after_seconds) <= $1`

// IdleForAutoSleep lists up to limit virtual clusters idle at now.
func IdleForAutoSleep(ctx context.Context, q store.Querier, now time.Time, limit int) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT v.id FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
		WHERE `+idleCondition+` ORDER BY v.active_time LIMIT $3`, now, autoSleepPhases, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// StillIdle re-checks one virtual cluster under the caller's locks.
func StillIdle(ctx context.Context, q store.Querier, id string, now time.Time) (bool, error) {
	var idle bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
		WHERE v.id = $3 AND `+idleCondition+`)`, now, autoSleepPhases, id).Scan(&idle)
	return idle, err
}

var autoSleepPhases = []string{string(PhaseReady), string(PhaseDegraded)}

// moveRow is MoveDeferred's write; as Many, for several incarnations at
// once (a batch of approvals, store.SetWrite).
var moveRow = &store.SetWrite{
	One: `
		UPDATE virtual_clusters SET phase = $2, gpu_centi = $3, cpu_millis = $4, memory_bytes = $5,
		       limit_gpu_centi = $6, limit_cpu_millis = $7, limit_memory_bytes = $8,
		       chart_version = $9, kubernetes_version = $10, generation = $11, host_cluster_id = NULLIF($12, ''),
		       status_message = '', version = $13, update_time = $14
		 WHERE uid = $1`,
	Many: `
		UPDATE virtual_clusters v SET phase = u.phase, gpu_centi = u.gpu, cpu_millis = u.cpu, memory_bytes = u.mem,
		       limit_gpu_centi = u.lim_gpu, limit_cpu_millis = u.lim_cpu, limit_memory_bytes = u.lim_mem,
		       chart_version = u.chart, kubernetes_version = u.kube, generation = u.gen, host_cluster_id = NULLIF(u.host, ''),
		       status_message = '', version = u.version, update_time = u.updated
		  FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[],
		              $9::text[], $10::text[], $11::bigint[], $12::text[], $13::bigint[], $14::timestamptz[])
		       AS u(uid, phase, gpu, cpu, mem, lim_gpu, lim_cpu, lim_mem, chart, kube, gen, host, version, updated)
		 WHERE v.uid = u.uid`,
	Key: 1,
}

// MoveDeferred is Move (and, with hostCluster set, PlaceOn) for the
// current incarnation cur, which the transaction has locked: the row is
// computed here and the write deferred (store.Tx.ExecDeferred). It returns
// the row as stored.
func MoveDeferred(tx *store.Tx, cur VirtualCluster, phase Phase, q quota.Resources, limit *quota.Resources, v Versions, bump bool, hostCluster string) VirtualCluster {
	next := cur
	next.Phase, next.Spec.Quota, next.Spec.Limit = phase, q, limit
	next.Spec.ChartVersion, next.Spec.KubernetesVersion = v.Chart, v.Kubernetes
	if bump {
		next.Generation++
	}
	if hostCluster != "" {
		next.HostCluster = hostCluster
	}
	next.StatusMessage, next.Version, next.Updated = "", cur.Version+1, store.Now()
	lg, lc, lm := limitColumns(limit)
	tx.ExecDeferredSet(moveRow, cur.UID, phase, q.GPU, q.CPUMillis, q.MemoryBytes, lg, lc, lm, v.Chart, v.Kubernetes,
		next.Generation, next.HostCluster, next.Version, next.Updated)
	return next
}

// PlaceOn records the host cluster a virtual cluster runs on (its create
// request is being approved; the caller holds the locks placement needs).
func PlaceOn(ctx context.Context, tx *store.Tx, id, hostCluster string) error {
	_, err := tx.Exec(ctx, `UPDATE virtual_clusters SET host_cluster_id = $3 WHERE uid = `+currentUID, id, gonePhases, hostCluster)
	return err
}

// RejectPending marks a virtual cluster still waiting for approval
// REJECTED (its request was rejected or cancelled).
func RejectPending(ctx context.Context, tx *store.Tx, id, message string) (VirtualCluster, bool, error) {
	// At most one incarnation of an id is not gone, so this never touches
	// another team's history.
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
	return scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET phase = $3, conditions = $4, observed_generation = $5,
		status_message = $6, alloc_gpu_centi = $7, alloc_cpu_millis = $8, alloc_memory_bytes = $9, endpoint = $10,
		active_time = CASE WHEN $11 THEN now() ELSE active_time END,
		version = version + 1, update_time = now() WHERE uid = `+currentUID+` RETURNING `+columns,
		id, gonePhases, st.Phase, raw, st.ObservedGeneration, st.Message, st.Allocated.GPU, st.Allocated.CPUMillis,
		st.Allocated.MemoryBytes, st.Endpoint, st.Allocated.GPU > 0))
}

// SetPhase changes phase and status message only (the worker giving up).
func SetPhase(ctx context.Context, tx *store.Tx, id string, phase Phase, message string) (VirtualCluster, error) {
	return scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET phase = $3, status_message = $4,
		version = version + 1, update_time = now() WHERE uid = `+currentUID+` RETURNING `+columns, id, gonePhases, phase, message))
}

// MarkDeleted records that nothing is left on the host.
func MarkDeleted(ctx context.Context, tx *store.Tx, id string) (VirtualCluster, error) {
	return scan(tx.QueryRow(ctx, `UPDATE virtual_clusters SET phase = $3, observed_generation = generation,
		conditions = '[]', status_message = '', endpoint = '', alloc_gpu_centi = 0, alloc_cpu_millis = 0,
		alloc_memory_bytes = 0, version = version + 1, update_time = now() WHERE uid = `+currentUID+` RETURNING `+columns, id, gonePhases, PhaseDeleted))
}

func sum(ctx context.Context, q store.Querier, sql string, args ...any) (quota.Resources, error) {
	var r quota.Resources
	err := q.QueryRow(ctx, sql, args...).Scan(&r.GPU, &r.CPUMillis, &r.MemoryBytes)
	return r, err
}

// reservesQuota holds for a virtual cluster v whose quota is reserved: it
// is awake, or its department keeps sleeping virtual clusters' quota
// (departments.sleeping_keeps_quota, the default).
const reservesQuota = `(NOT v.sleep OR (SELECT d.sleeping_keeps_quota FROM teams rt JOIN departments d ON d.id = rt.department_id
	WHERE rt.id = v.team_id))`

// The sums below read held_quota, which triggers keep equal to what the
// virtual clusters hold on each host cluster per team (migration 10), so
// they cost the same however many virtual clusters a team, a department
// or a host pool has. heldBy is the quota one virtual cluster (id $1 of
// the live ones) holds, on the host cluster and team it holds it for; a sum
// "except excludeVC" subtracts it where it counted.
const heldBy = `SELECT v.host_cluster_id, v.team_id, t.node_pool, t.department_id, v.gpu_centi, v.cpu_millis, v.memory_bytes
	  FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
	 WHERE v.id = $1 AND v.phase = ANY($2) AND ` + reservesQuota

// QuotaOfTeam sums the quotas of the team's virtual clusters that hold
// quota, except excludeVC ("" excludes none).
func QuotaOfTeam(ctx context.Context, q store.Querier, team, excludeVC string) (quota.Resources, error) {
	return sum(ctx, q, quotaOfTeamSQL, excludeVC, holdsQuotaPhases, team)
}

const quotaOfTeamSQL = `WITH x AS (` + heldBy + ` AND v.team_id = $3),
		     h AS (SELECT COALESCE(SUM(gpu_centi),0) g, COALESCE(SUM(cpu_millis),0) c, COALESCE(SUM(memory_bytes),0) m
		             FROM held_quota WHERE team_id = $3)
		SELECT h.g - COALESCE((SELECT SUM(gpu_centi) FROM x),0), h.c - COALESCE((SELECT SUM(cpu_millis) FROM x),0),
		       h.m - COALESCE((SELECT SUM(memory_bytes) FROM x),0) FROM h`

func scanSum(row pgx.Row) (quota.Resources, error) {
	var r quota.Resources
	return r, row.Scan(&r.GPU, &r.CPUMillis, &r.MemoryBytes)
}

// QueueQuotaOfTeams is QuotaOfTeam (excluding none) for many teams in one
// statement: each team's sum is handed to each, teams holding nothing
// included.
func QueueQuotaOfTeams(b *store.Batch, teams []string, each func(team string, held quota.Resources)) {
	type teamSum struct {
		team string
		held quota.Resources
	}
	store.QueueEach(b, func(row pgx.Row) (teamSum, error) {
		var s teamSum
		return s, row.Scan(&s.team, &s.held.GPU, &s.held.CPUMillis, &s.held.MemoryBytes)
	}, func(s teamSum) { each(s.team, s.held) },
		`SELECT u.team, COALESCE(SUM(h.gpu_centi),0), COALESCE(SUM(h.cpu_millis),0), COALESCE(SUM(h.memory_bytes),0)
		  FROM unnest($1::text[]) AS u(team) LEFT JOIN held_quota h ON h.team_id = u.team
		 GROUP BY u.team`, teams)
}

// QueueQuotaOfTeam is QuotaOfTeam, queued in b (for Tx.Send).
func QueueQuotaOfTeam(b *store.Batch, dst *quota.Resources, team, excludeVC string) {
	store.QueueOne(b, dst, quotaOfTeamSQL, false, scanSum, nil, excludeVC, holdsQuotaPhases, team)
}

// QuotaOnHostPool sums the quotas of the virtual clusters on a host
// cluster whose team runs in node pool pool (the pool's used capacity on
// that cluster), except excludeVC.
func QuotaOnHostPool(ctx context.Context, q store.Querier, hostCluster, pool, excludeVC string) (quota.Resources, error) {
	return sum(ctx, q, `WITH x AS (`+heldBy+` AND v.host_cluster_id = $3 AND t.node_pool = $4),
		     h AS (SELECT COALESCE(SUM(gpu_centi),0) g, COALESCE(SUM(cpu_millis),0) c, COALESCE(SUM(memory_bytes),0) m
		             FROM held_quota WHERE host_cluster_id = $3 AND node_pool = $4)
		SELECT h.g - COALESCE((SELECT SUM(gpu_centi) FROM x),0), h.c - COALESCE((SELECT SUM(cpu_millis) FROM x),0),
		       h.m - COALESCE((SELECT SUM(memory_bytes) FROM x),0) FROM h`, excludeVC, holdsQuotaPhases, hostCluster, pool)
}

// ParentQuotasOnHost sums the quotas the team's and the department's
// virtual clusters hold on one host cluster: the quotas of their KAI
// parent queues there, which cover what lives on that cluster.
func ParentQuotasOnHost(ctx context.Context, q store.Querier, hostCluster, dept, team string) (teamSum, deptSum quota.Resources, err error) {
	err = q.QueryRow(ctx, `SELECT
		       COALESCE(SUM(gpu_centi) FILTER (WHERE team_id = $3), 0),
		       COALESCE(SUM(cpu_millis) FILTER (WHERE team_id = $3), 0),
		       COALESCE(SUM(memory_bytes) FILTER (WHERE team_id = $3), 0),
		       COALESCE(SUM(gpu_centi), 0), COALESCE(SUM(cpu_millis), 0), COALESCE(SUM(memory_bytes), 0)
		  FROM held_quota WHERE host_cluster_id = $1 AND department_id = $2`,
		hostCluster, dept, team).Scan(&teamSum.GPU, &teamSum.CPUMillis, &teamSum.MemoryBytes,
		&deptSum.GPU, &deptSum.CPUMillis, &deptSum.MemoryBytes)
	return teamSum, deptSum, err
}

// HeldQuotaDrift lists, for tests and operators, every (host cluster, team)
// whose held_quota row differs from a full recount of the virtual
// clusters: empty when the triggers kept it exact.
func HeldQuotaDrift(ctx context.Context, q store.Querier) ([]string, error) {
	rows, err := q.Query(ctx, `
		WITH recount AS (
		  SELECT v.host_cluster_id, v.team_id, SUM(v.gpu_centi) g, SUM(v.cpu_millis) c, SUM(v.memory_bytes) m
		    FROM virtual_clusters v
		   WHERE v.host_cluster_id IS NOT NULL AND v.phase = ANY($1) AND `+reservesQuota+`
		   GROUP BY 1, 2),
		kept AS (
		  SELECT h.host_cluster_id, h.team_id, h.gpu_centi g, h.cpu_millis c, h.memory_bytes m
		    FROM held_quota h JOIN teams t ON t.id = h.team_id
		   WHERE h.node_pool = t.node_pool AND h.department_id = t.department_id
		     AND (h.gpu_centi, h.cpu_millis, h.memory_bytes) <> (0, 0, 0))
		SELECT COALESCE(r.host_cluster_id, k.host_cluster_id) || '/' || COALESCE(r.team_id, k.team_id) || ': kept ' ||
		       COALESCE(k.g || '/' || k.c || '/' || k.m, 'nothing') || ', recount ' || COALESCE(r.g || '/' || r.c || '/' || r.m, 'nothing')
		  FROM recount r FULL JOIN kept k USING (host_cluster_id, team_id)
		 WHERE (r.g, r.c, r.m) IS DISTINCT FROM (k.g, k.c, k.m)
		UNION ALL
		SELECT h.host_cluster_id || '/' || h.team_id || ': kept under pool ' || h.node_pool || ' of ' || h.department_id ||
		       ', the team is in pool ' || t.node_pool || ' of ' || t.department_id
		  FROM held_quota h JOIN teams t ON t.id = h.team_id
		 WHERE h.node_pool <> t.node_pool OR h.department_id <> t.department_id
		ORDER BY 1`, holdsQuotaPhases)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// OnHostCluster lists (by name, at most limit) the virtual clusters on a
// host cluster that are not gone, and those waiting for approval that ask
// for it by name, and counts them all.
func OnHostCluster(ctx context.Context, q store.Querier, hostCluster string, limit int) (names []string, total int, err error) {
	rows, err := q.Query(ctx, `SELECT team_id, id, count(*) OVER () FROM virtual_clusters
		WHERE (host_cluster_id = $1 OR (phase = $4 AND placement_host_cluster = $1)) AND NOT (phase = ANY($2))
		ORDER BY team_id, id LIMIT $3`, hostCluster, gonePhases, limit, PhasePendingApproval)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var team, id string
		if err := rows.Scan(&team, &id, &total); err != nil {
			return nil, 0, err
		}
		names = append(names, VirtualCluster{ID: id, Team: team}.Name())
	}
	return names, total, rows.Err()
}

// OnHostClusterInTier lists (at most limit) the virtual clusters on a host
// cluster that are not gone and whose team is in tier.
func OnHostClusterInTier(ctx context.Context, q store.Querier, hostCluster, tier string, limit int) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT v.team_id, v.id FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
		WHERE v.host_cluster_id = $1 AND t.isolation_tier = $2 AND NOT (v.phase = ANY($3)) ORDER BY v.team_id, v.id LIMIT $4`,
		hostCluster, tier, gonePhases, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var team, id string
		err := r.Scan(&team, &id)
		return VirtualCluster{ID: id, Team: team}.Name(), err
	})
}

// ForgetHostCluster clears the host cluster of gone virtual clusters that
// ran on it (their history is in the audit log), so it can be deleted.
func ForgetHostCluster(ctx context.Context, tx *store.Tx, hostCluster string) error {
	_, err := tx.Exec(ctx, `UPDATE virtual_clusters SET host_cluster_id = NULL WHERE host_cluster_id = $1 AND phase = ANY($2)`,
		hostCluster, gonePhases)
	return err
}

// CountByHostCluster counts the virtual clusters that are not gone on each
// host cluster.
func CountByHostCluster(ctx context.Context, q store.Querier) (map[string]int64, error) {
	return store.CountBy(ctx, q, `SELECT host_cluster_id, count(*) FROM virtual_clusters
		WHERE host_cluster_id IS NOT NULL AND NOT (phase = ANY($1)) GROUP BY host_cluster_id`, gonePhases)
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
	"phase":        {Column: "phase", Type: filter.Enum, Enum: PhasesWhere(Phase.Valid)},
	"host_cluster": {Column: "host_cluster_id", Type: filter.String, Strip: "hostClusters/"},
}

// ListOptions select one page of a list.
type ListOptions struct {
	PageSize int32
	Filter   string
	After    Cursor // the last row of the previous page
	// Team limits the list to one team; otherwise Scope applies (teams it
	// names, and teams of the departments it names).
	Team  string
	Scope store.Scope
}

// Cursor is where a list page ends: ids repeat across teams once a gone
// name is taken again, so (id, team) orders the rows.
type Cursor struct {
	ID   string `json:"i"`
	Team string `json:"t,omitempty"`
}

// CursorOf is the cursor after v.
func CursorOf(v VirtualCluster) Cursor { return Cursor{ID: v.ID, Team: v.Team} }

// List returns a page of virtual clusters by (id, team), and whether more
// follow. A team's earlier incarnations of an id it took again are left
// out (the newest is the team's virtual cluster by that name).
func List(ctx context.Context, q store.Querier, o ListOptions) ([]VirtualCluster, bool, error) {
	lq, err := store.NewList(o.PageSize, o.Filter, listFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("(id, team_id) > (" + lq.Arg(o.After.ID) + ", " + lq.Arg(o.After.Team) + ")")
	lq.Where(`NOT EXISTS (SELECT 1 FROM virtual_clusters newer WHERE newer.id = virtual_clusters.id
		AND newer.team_id = virtual_clusters.team_id AND (newer.create_time, newer.uid) > (virtual_clusters.create_time, virtual_clusters.uid))`)
	switch {
	case o.Team != "":
		lq.Where("team_id = " + lq.Arg(o.Team))
	case !o.Scope.All:
		lq.Where("team_id = ANY(" + lq.Arg(o.Scope.Teams) + ") OR team_id IN (SELECT id FROM teams WHERE department_id = ANY(" + lq.Arg(o.Scope.Departments) + "))")
	}
	return store.FetchPage(ctx, q, lq, `SELECT `+columns+` FROM virtual_clusters`, "id, team_id", scan)
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
