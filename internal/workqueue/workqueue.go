// Package workqueue owns the reconcile_work table, the seam between the
// API and the worker: a row per virtual cluster that needs reconciling,
// written in the same transaction as the change that needs it, and
// claimed, renewed and finished by workers.
//
// Rows coalesce: enqueueing an already queued virtual cluster only moves
// enqueue_time and run_after. A worker remembers the enqueue_time it
// claimed and deletes the row only if it is unchanged when it finishes, so
// a change that arrives during a reconcile is never lost.
//
// Each enqueue also stores the W3C traceparent of the span in ctx (the API
// call making the change), so the worker's reconcile continues its trace.
package workqueue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/telemetry"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// resyncPhases: virtual clusters whose team or department changes are
// re-applied, and which a resync queues (virtualcluster.Phase.NeedsResync).
var resyncPhases = virtualcluster.PhasesWhere(virtualcluster.Phase.NeedsResync)

const upsert = ` ON CONFLICT (virtual_cluster_id) DO UPDATE
	SET enqueue_time = clock_timestamp(), run_after = clock_timestamp(), attempts = 0, last_error = '',
	    trace_parent = EXCLUDED.trace_parent`

// enqueueOne is Enqueue's write; as Many, for several virtual clusters
// at once (a batch of approvals, store.SetWrite). Two rows for one virtual
// cluster are not merged (Key): ON CONFLICT cannot touch a row twice.
var enqueueOne = &store.SetWrite{
	One: `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		VALUES ($1, clock_timestamp(), clock_timestamp(), $2)` + upsert,
	Many: `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT u.id, clock_timestamp(), clock_timestamp(), u.trace_parent
		  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(id, trace_parent, n) ORDER BY u.n` + upsert,
	Key: 1,
}

// Enqueue asks for a reconcile of the virtual cluster.
func Enqueue(ctx context.Context, tx *store.Tx, virtualCluster string) error {
	// Sent with the transaction's next statement or its COMMIT (nothing
	// here reads the row back).
	tx.ExecDeferredSet(enqueueOne, virtualCluster, traceParent(ctx))
	return nil
}

// resyncLiteral is resyncPhases as an SQL array literal (the phases are
// the package's constants, never input), so that the set form of
// EnqueueTeam needs no argument that is the same for every row.
var resyncLiteral = store.TextArrayLiteral(resyncPhases)

// enqueueTeamRows is EnqueueTeam's write; as Many, for the teams of a
// batch of team changes (store.SetWrite), team by team.
var enqueueTeamRows = &store.SetWrite{
	One: `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT id, clock_timestamp(), clock_timestamp(), $2 FROM virtual_clusters
		 WHERE team_id = $1 AND phase = ANY(` + resyncLiteral + `)` + upsert,
	Many: `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT v.id, clock_timestamp(), clock_timestamp(), u.trace_parent
		  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(team, trace_parent, n)
		  JOIN virtual_clusters v ON v.team_id = u.team AND v.phase = ANY(` + resyncLiteral + `)
		 ORDER BY u.n, v.id` + upsert,
	Key: 1,
}

// EnqueueTeam asks for a reconcile of every virtual cluster of a team that
// needs resyncing (its parent queue or its members changed).
func EnqueueTeam(ctx context.Context, tx *store.Tx, team string) error {
	tx.ExecDeferredSet(enqueueTeamRows, team, traceParent(ctx))
	return nil
}

// EnqueueDepartment does the same for every team of a department.
func EnqueueDepartment(ctx context.Context, tx *store.Tx, department string) error {
	_, err := tx.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT v.id, clock_timestamp(), clock_timestamp(), $2 FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
		 WHERE t.department_id = $1 AND v.phase = ANY($3)`+upsert, department, traceParent(ctx), resyncPhases)
	return err
}

// EnqueueHostCluster asks for a reconcile of every virtual cluster on a
// host cluster that needs resyncing (the cluster came back, or its
// reachability or nodes changed).
func EnqueueHostCluster(ctx context.Context, q store.Querier, hostCluster string) (int64, error) {
	tag, err := q.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT id, clock_timestamp(), clock_timestamp(), $2 FROM virtual_clusters
		 WHERE host_cluster_id = $1 AND phase = ANY($3)`+upsert, hostCluster, traceParent(ctx), resyncPhases)
	return tag.RowsAffected(), err
}

// EnqueueDepartmentOnHost asks for a reconcile of the department's virtual
// clusters on one host cluster: their parent queues there cover what the
// department holds on that cluster, which just changed.
func EnqueueDepartmentOnHost(ctx context.Context, tx *store.Tx, department, hostCluster string) error {
	_, err := tx.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT v.id, clock_timestamp(), clock_timestamp(), $3 FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
		 WHERE t.department_id = $1 AND v.host_cluster_id = $2 AND v.phase = ANY($4)`+upsert,
		department, hostCluster, traceParent(ctx), resyncPhases)
	return err
}

// Resync queues every virtual cluster that needs resyncing for a reconcile
// that repairs drift. Queued ones keep their place. Safe from several
// workers at once. It returns how many it queued.
func Resync(ctx context.Context, q store.Querier) (int64, error) {
	tag, err := q.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id)
		SELECT id FROM virtual_clusters WHERE phase = ANY($1)
		ON CONFLICT (virtual_cluster_id) DO NOTHING`, resyncPhases)
	return tag.RowsAffected(), err
}

// traceParent is the traceparent to store, NULL when ctx is not traced.
func traceParent(ctx context.Context) *string {
	if tp := telemetry.TraceParent(ctx); tp != "" {
		return &tp
	}
	return nil
}

// Claim is one leased work item.
type Claim struct {
	VirtualCluster string
	// HostCluster is the host cluster the virtual cluster runs on ("" when
	// it has none yet).
	HostCluster string
	Attempts    int
	// Enqueued is the enqueue_time claimed; Done and Later compare it.
	Enqueued time.Time
	// TraceParent is the W3C traceparent of the change that enqueued the
	// work ("" when untraced).
	TraceParent string
}

// Now is the database's clock, the one run_after is compared with.
func Now(ctx context.Context, q store.Querier) (time.Time, error) {
	var t time.Time
	err := q.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t, err
}

// ClaimDue leases up to n due items to owner for lease (SKIP LOCKED: two
// workers never claim the same item); with a cutoff, only items due at or
// before it.
//
// Work is sharded by host cluster: at most perCluster items of one host
// cluster are claimed, and busy lists host clusters with fewer free slots
// (host cluster -> slots left, 0 for none), so a host cluster that is slow
// or down never takes every slot of a worker.
func ClaimDue(ctx context.Context, q store.Querier, owner string, lease time.Duration, n int, cutoff *time.Time,
	perCluster int, busy map[string]int) ([]Claim, error) {
	if n <= 0 {
		return nil, nil
	}
	if perCluster <= 0 {
		perCluster = n
	}
	// Never nil: a NULL array would make "= ANY" NULL and filter out everything.
	busyClusters, full, busySlots := []string{}, []string{}, []int32{}
	for c, free := range busy {
		if free <= 0 {
			full = append(full, c)
			continue
		}
		busyClusters, busySlots = append(busyClusters, c), append(busySlots, int32(free))
	}
	// Candidates (not of full host clusters) are locked first: FOR UPDATE
	// cannot share a level with the window function that caps each host
	// cluster. A few times n of them leave room for the cap to skip some;
	// locked rows that are not claimed are released when the statement ends.
	rows, err := q.Query(ctx, `
		WITH due AS (
		  SELECT w.virtual_cluster_id, w.run_after, COALESCE(v.host_cluster_id, '') AS host_cluster
		    FROM reconcile_work w LEFT JOIN virtual_clusters v ON v.id = w.virtual_cluster_id
		   WHERE w.run_after <= COALESCE($4::timestamptz, clock_timestamp())
		     AND (w.lease_expire_time IS NULL OR w.lease_expire_time < clock_timestamp())
		     AND NOT (COALESCE(v.host_cluster_id, '') = ANY($8::text[]))
		   ORDER BY w.run_after
		   LIMIT $3 * 4 FOR UPDATE OF w SKIP LOCKED),
		ranked AS (
		  SELECT d.*, row_number() OVER (PARTITION BY d.host_cluster ORDER BY d.run_after) AS rank FROM due d),
		picked AS (
		  SELECT r.virtual_cluster_id, r.host_cluster FROM ranked r
		    LEFT JOIN unnest($6::text[], $7::int[]) AS b(host_cluster, free) ON b.host_cluster = r.host_cluster
		   WHERE r.rank <= COALESCE(b.free, $5)
		   ORDER BY r.run_after LIMIT $3)
		UPDATE reconcile_work w SET lease_owner = $1, lease_expire_time = clock_timestamp() + $2::interval,
		       attempts = w.attempts + 1
		  FROM picked p
		 WHERE w.virtual_cluster_id = p.virtual_cluster_id
		RETURNING w.virtual_cluster_id, p.host_cluster, w.attempts, w.enqueue_time, COALESCE(w.trace_parent, '')`,
		owner, lease.String(), n, cutoff, perCluster, busyClusters, busySlots, full)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claim, error) {
		var c Claim
		return c, r.Scan(&c.VirtualCluster, &c.HostCluster, &c.Attempts, &c.Enqueued, &c.TraceParent)
	})
}

// Renew extends owner's lease on a claim while its reconcile runs.
func Renew(ctx context.Context, q store.Querier, c Claim, owner string, lease time.Duration) error {
	_, err := q.Exec(ctx, `UPDATE reconcile_work SET lease_expire_time = clock_timestamp() + $3::interval
		WHERE virtual_cluster_id = $1 AND lease_owner = $2`, c.VirtualCluster, owner, lease.String())
	return err
}

// Done finishes a claim: the row goes away unless the virtual cluster was
// enqueued again while it was worked on (enqueue_time moved), in which case
// it stays, due now, unleased.
func Done(ctx context.Context, q store.Querier, c Claim) error {
	if _, err := q.Exec(ctx, `DELETE FROM reconcile_work WHERE virtual_cluster_id = $1 AND enqueue_time = $2`, c.VirtualCluster, c.Enqueued); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `UPDATE reconcile_work SET lease_owner = '', lease_expire_time = NULL, attempts = 0
		WHERE virtual_cluster_id = $1`, c.VirtualCluster)
	return err
}

// Later puts the claim back to run after d. failure, when set, is recorded
// and the attempts are kept (backoff); otherwise they restart. A claim
// enqueued again meanwhile is due at once with fresh attempts.
func Later(ctx context.Context, q store.Querier, c Claim, d time.Duration, failure string, failed bool) error {
	keep := 0
	if failed {
		keep = 1
	}
	_, err := q.Exec(ctx, `UPDATE reconcile_work SET lease_owner = '', lease_expire_time = NULL,
		run_after = CASE WHEN enqueue_time = $2 THEN clock_timestamp() + $3::interval ELSE clock_timestamp() END,
		attempts = CASE WHEN $4 = 1 AND enqueue_time = $2 THEN attempts ELSE 0 END, last_error = $5
		WHERE virtual_cluster_id = $1`, c.VirtualCluster, c.Enqueued, d.String(), keep, failure)
	return err
}

// ReleaseAll gives back owner's leases (a worker shutting down), so another
// worker takes over at once instead of after the leases expire; the
// attempt the claim counted is given back too.
func ReleaseAll(ctx context.Context, q store.Querier, owner string) error {
	_, err := q.Exec(ctx, `UPDATE reconcile_work SET lease_owner = '', lease_expire_time = NULL,
		attempts = GREATEST(attempts - 1, 0) WHERE lease_owner = $1`, owner)
	return err
}

// QueueStats describe the queue at one moment.
type QueueStats struct {
	Depth  int64 // every work item
	Due    int64 // due now and not leased: waiting for a worker
	Leased int64 // being worked on
	// OldestDueAge is how long the oldest due, unleased item has waited.
	OldestDueAge time.Duration
}

// Stats reads the queue's numbers in one query (metrics).
func Stats(ctx context.Context, q store.Querier) (QueueStats, error) {
	var st QueueStats
	var age float64
	err := q.QueryRow(ctx, `
		SELECT count(*),
		       count(*) FILTER (WHERE run_after <= now() AND (lease_expire_time IS NULL OR lease_expire_time < now())),
		       count(*) FILTER (WHERE lease_expire_time >= now()),
		       COALESCE(EXTRACT(EPOCH FROM now() - min(run_after)
		         FILTER (WHERE run_after <= now() AND (lease_expire_time IS NULL OR lease_expire_time < now()))), 0)::float8
		  FROM reconcile_work`).Scan(&st.Depth, &st.Due, &st.Leased, &age)
	st.OldestDueAge = time.Duration(age * float64(time.Second))
	return st, err
}
