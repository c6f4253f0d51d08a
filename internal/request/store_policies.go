package request

// The approval_policies table: every statement on it is in this file.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
)

const policyColumns = `id, seq, display_name, expression, disabled, version, create_time, update_time`

func scanPolicy(row pgx.Row) (Policy, error) {
	var p Policy
	err := row.Scan(&p.ID, &p.Seq, &p.DisplayName, &p.Expression, &p.Disabled, &p.Version, &p.Created, &p.Updated)
	return p, err
}

// GetPolicy reads a policy; lock takes a row lock (in a Tx).
func GetPolicy(ctx context.Context, q store.Querier, id string, lock bool) (Policy, error) {
	return store.GetOne(ctx, q, `SELECT `+policyColumns+` FROM approval_policies WHERE id = $1`, lock, scanPolicy,
		errs.NotFound(names.ApprovalPolicy(id)), id)
}

// queueEnabledPolicies queues the read of the enabled approval policies,
// in evaluation order, in b (for Tx.Send).
func queueEnabledPolicies(b *store.Batch, dst *[]Policy) {
	store.QueueMany(b, dst, scanPolicy, `SELECT `+policyColumns+` FROM approval_policies WHERE NOT disabled ORDER BY seq`)
}

func insertPolicy(ctx context.Context, tx *store.Tx, p Policy) (Policy, error) {
	row, err := scanPolicy(tx.QueryRow(ctx, `INSERT INTO approval_policies (id, display_name, expression, disabled)
		VALUES ($1, $2, $3, $4) RETURNING `+policyColumns, p.ID, p.DisplayName, p.Expression, p.Disabled))
	if store.SQLState(err) == "23505" {
		return row, errs.AlreadyExists(names.ApprovalPolicy(p.ID))
	}
	return row, err
}

func updatePolicy(ctx context.Context, tx *store.Tx, p Policy) (Policy, error) {
	return scanPolicy(tx.QueryRow(ctx, `UPDATE approval_policies SET display_name = $2, expression = $3, disabled = $4,
		version = version + 1, update_time = now() WHERE id = $1 RETURNING `+policyColumns, p.ID, p.DisplayName, p.Expression, p.Disabled))
}

func deletePolicy(ctx context.Context, tx *store.Tx, id string) error {
	_, err := tx.Exec(ctx, `DELETE FROM approval_policies WHERE id = $1`, id)
	return err
}

// ListPolicies returns policies with seq above after, in creation order,
// and whether more follow.
func ListPolicies(ctx context.Context, q store.Querier, pageSize int32, after int64) ([]Policy, bool, error) {
	lq, err := store.NewList(pageSize, "", nil)
	if err != nil {
		return nil, false, err
	}
	lq.Where("seq > " + lq.Arg(after))
	return store.FetchPage(ctx, q, lq, `SELECT `+policyColumns+` FROM approval_policies`, "seq", scanPolicy)
}
