// Package workqueue is the seam between the API and the worker: a row per
// virtual cluster that needs reconciling, written in the same transaction as
// the change that needs it.
//
// Rows coalesce: enqueueing an already queued virtual cluster only moves
// enqueue_time and run_after. The worker remembers the enqueue_time it
// claimed and deletes the row only if it is unchanged when it finishes, so a
// change that arrives during a reconcile is never lost.
//
// Each enqueue also stores the W3C traceparent of the span in ctx (the API
// call making the change), so the worker's reconcile continues its trace.
package workqueue

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/telemetry"
)

const upsert = ` ON CONFLICT (virtual_cluster_id) DO UPDATE
	SET enqueue_time = clock_timestamp(), run_after = clock_timestamp(), attempts = 0, last_error = '',
	    trace_parent = EXCLUDED.trace_parent`

// Enqueue asks for a reconcile of the virtual cluster.
func Enqueue(ctx context.Context, tx pgx.Tx, virtualCluster string) error {
	_, err := tx.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		VALUES ($1, clock_timestamp(), clock_timestamp(), $2)`+upsert, virtualCluster, traceParent(ctx))
	return err
}

// EnqueueTeam asks for a reconcile of every live virtual cluster of a team
// (its parent queue or its members changed).
func EnqueueTeam(ctx context.Context, tx pgx.Tx, team string) error {
	_, err := tx.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT id, clock_timestamp(), clock_timestamp(), $2 FROM virtual_clusters
		 WHERE team_id = $1 AND phase IN ('PROVISIONING', 'READY', 'DEGRADED')`+upsert, team, traceParent(ctx))
	return err
}

// EnqueueDepartment does the same for every team of a department.
func EnqueueDepartment(ctx context.Context, tx pgx.Tx, department string) error {
	_, err := tx.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id, enqueue_time, run_after, trace_parent)
		SELECT v.id, clock_timestamp(), clock_timestamp(), $2 FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
		 WHERE t.department_id = $1 AND v.phase IN ('PROVISIONING', 'READY', 'DEGRADED')`+upsert, department, traceParent(ctx))
	return err
}

// traceParent is the traceparent to store, NULL when ctx is not traced.
func traceParent(ctx context.Context) *string {
	if tp := telemetry.TraceParent(ctx); tp != "" {
		return &tp
	}
	return nil
}
