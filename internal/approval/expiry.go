package approval

import (
	"context"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// ExpireVirtualClusters creates an approved delete request for every live
// virtual cluster whose expire_time has passed, one transaction each. Safe
// to run from several replicas: rows are claimed with SKIP LOCKED and the
// phase moves to DELETING, so each is expired once. Returns how many.
func (s *Service) ExpireVirtualClusters(ctx context.Context) (int, error) {
	actor := audit.SystemActor("expiry")
	n := 0
	for {
		done := false
		err := store.InTx(ctx, s.Tenancy.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
			var id, team, dept string
			err := tx.QueryRow(ctx, `
				SELECT v.id, v.team_id, t.department_id FROM virtual_clusters v JOIN teams t ON t.id = v.team_id
				 WHERE v.expire_time IS NOT NULL AND v.expire_time <= $1
				   AND v.phase IN ('PROVISIONING', 'READY', 'DEGRADED', 'FAILED')
				 ORDER BY v.expire_time LIMIT 1`, s.now()).Scan(&id, &team, &dept)
			if err == pgx.ErrNoRows {
				done = true
				return nil
			}
			if err != nil {
				return err
			}
			// Lock order as everywhere else: department, then the virtual
			// cluster. Another replica may have expired it meanwhile.
			if _, err := tenancy.LockDepartment(ctx, tx, dept); err != nil {
				return err
			}
			var phase string
			if err := tx.QueryRow(ctx, `SELECT phase FROM virtual_clusters WHERE id = $1 FOR UPDATE`, id).Scan(&phase); err != nil {
				return err
			}
			if !isLive(phase) {
				return nil
			}
			// A pending request on this virtual cluster is superseded; it is
			// cancelled like any other, audit event included.
			rows, err := tx.Query(ctx, `SELECT `+requestColumns+` FROM requests
				WHERE virtual_cluster_id = $1 AND state = 'PENDING' FOR UPDATE`, id)
			if err != nil {
				return err
			}
			pending, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RequestRow, error) { return scanRequest(r) })
			if err != nil {
				return err
			}
			for i := range pending {
				if err := (&Requests{Service: s}).close(ctx, tx, &pending[i], actor, StateCancelled,
					"virtual cluster expired", "CancelRequest"); err != nil {
					return err
				}
			}
			payload, err := protojson.Marshal(&pb.Request{Payload: &pb.Request_DeleteVirtualCluster{
				DeleteVirtualCluster: &pb.DeleteVirtualClusterPayload{VirtualCluster: names.VirtualCluster(team, id)}}})
			if err != nil {
				return err
			}
			row, err := scanRequest(tx.QueryRow(ctx, `
				INSERT INTO requests (id, team_id, department_id, kind, virtual_cluster_id, payload, justification, state, requester)
				VALUES ($1, $2, $3, 'DELETE_VIRTUAL_CLUSTER', $4, $5, 'expire_time passed', 'PENDING', $6) RETURNING `+requestColumns,
				newRequestID(), team, dept, id, payload, actor.Subject))
			if err != nil {
				return err
			}
			if err := audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "CreateRequest", Resource: names.Request(row.ID),
				Department: dept, Team: team, After: row.Proto()}); err != nil {
				return err
			}
			return s.approve(ctx, tx, &row, actor, actor.Subject, "virtual cluster expired", "")
		})
		if err == nil && !done {
			n++ // counted once committed: InTx may run the callback again
		}
		if err != nil || done {
			return n, err
		}
	}
}
