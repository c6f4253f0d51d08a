package request

import (
	"context"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
)

// Policy is a stored auto-approval policy: a CEL expression over a request
// (internal/policy); enabled policies are tried in creation order.
type Policy struct {
	ID, DisplayName, Expression string
	Seq, Version                int64
	Disabled                    bool
	Created, Updated            time.Time
}

// Name is the API resource name.
func (p Policy) Name() string { return names.ApprovalPolicy(p.ID) }

// Etag of the current version.
func (p Policy) Etag() string { return store.Etag(p.Version, p.Updated) }

type policyJSON struct {
	Name        string          `json:"name,omitempty"`
	DisplayName string          `json:"display_name,omitempty"`
	Expression  string          `json:"expression,omitempty"`
	Disabled    bool            `json:"disabled,omitempty"`
	Etag        string          `json:"etag,omitempty"`
	CreateTime  *jsonshape.Time `json:"create_time,omitempty"`
	UpdateTime  *jsonshape.Time `json:"update_time,omitempty"`
}

// Snapshot renders p as the API does (the ApprovalPolicy message).
func (p Policy) Snapshot() any {
	return policyJSON{Name: p.Name(), DisplayName: p.DisplayName, Expression: p.Expression, Disabled: p.Disabled,
		Etag: p.Etag(), CreateTime: &jsonshape.Time{Time: p.Created}, UpdateTime: &jsonshape.Time{Time: p.Updated}}
}

func recordPolicy(ctx context.Context, tx *store.Tx, actor reqctx.Principal, action, resource, requestID string, before, after any) error {
	return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: action, Resource: resource, RequestID: requestID, Before: before, After: after})
}

// CreatePolicy stores a policy (its expression already compiled by the
// caller).
func CreatePolicy(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, p Policy) (Policy, error) {
	row, err := insertPolicy(ctx, tx, p)
	if err != nil {
		return row, err
	}
	return row, recordPolicy(ctx, tx, actor, "CreateApprovalPolicy", row.Name(), requestID, nil, row.Snapshot())
}

// UpdatePolicy locks the policy, checks etag, lets change edit a copy and
// stores it.
func UpdatePolicy(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string, change func(*Policy)) (Policy, error) {
	cur, err := GetPolicy(ctx, tx, id, true)
	if err != nil {
		return cur, err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return cur, err
	}
	next := cur
	change(&next)
	row, err := updatePolicy(ctx, tx, next)
	if err != nil {
		return row, err
	}
	return row, recordPolicy(ctx, tx, actor, "UpdateApprovalPolicy", row.Name(), "", cur.Snapshot(), row.Snapshot())
}

// DeletePolicy deletes a policy.
func DeletePolicy(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string) error {
	cur, err := GetPolicy(ctx, tx, id, true)
	if err != nil {
		return err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return err
	}
	if err := deletePolicy(ctx, tx, id); err != nil {
		return err
	}
	return recordPolicy(ctx, tx, actor, "DeleteApprovalPolicy", cur.Name(), "", cur.Snapshot(), nil)
}
