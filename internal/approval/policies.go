package approval

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/policy"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// Policies implements pb.ApprovalPolicyServiceServer. Platform admins
// manage policies; department admins may read them (they decide requests
// the policies did not).
type Policies struct {
	pb.UnimplementedApprovalPolicyServiceServer
	*Service
}

const policyColumns = `id, seq, display_name, expression, disabled, version, create_time, update_time`

type policyRow struct {
	ID, DisplayName, Expression string
	Seq, Version                int64
	Disabled                    bool
	Created, Updated            time.Time
}

func scanPolicy(row pgx.Row) (policyRow, error) {
	var p policyRow
	err := row.Scan(&p.ID, &p.Seq, &p.DisplayName, &p.Expression, &p.Disabled, &p.Version, &p.Created, &p.Updated)
	return p, err
}

func (p policyRow) proto() *pb.ApprovalPolicy {
	return &pb.ApprovalPolicy{
		Name: names.ApprovalPolicy(p.ID), DisplayName: p.DisplayName, Expression: p.Expression, Disabled: p.Disabled,
		Etag: tenancy.Etag(p.Version, p.Updated), CreateTime: timestamppb.New(p.Created), UpdateTime: timestamppb.New(p.Updated),
	}
}

func (s *Policies) canRead(a *identity.Access) bool { return a.PlatformAdmin || len(a.AdminOf) > 0 }

func (s *Policies) get(ctx context.Context, q tenancy.Querier, name string, lock bool) (policyRow, error) {
	id, err := names.ParseApprovalPolicy("name", name)
	if err != nil {
		return policyRow{}, err
	}
	sql := `SELECT ` + policyColumns + ` FROM approval_policies WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	p, err := scanPolicy(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, errs.NotFound(name)
	}
	return p, err
}

func (s *Policies) GetApprovalPolicy(ctx context.Context, req *pb.GetApprovalPolicyRequest) (*pb.ApprovalPolicy, error) {
	a, err := s.Tenancy.Access(ctx)
	if err != nil {
		return nil, err
	}
	if !s.canRead(a) {
		return nil, errs.NotFound(req.GetName())
	}
	p, err := s.get(ctx, s.Tenancy.Pool, req.GetName(), false)
	if err != nil {
		return nil, err
	}
	return p.proto(), nil
}

func (s *Policies) ListApprovalPolicies(ctx context.Context, req *pb.ListApprovalPoliciesRequest) (*pb.ListApprovalPoliciesResponse, error) {
	a, err := s.Tenancy.Access(ctx)
	if err != nil {
		return nil, err
	}
	q, err := store.NewList(req.GetPageSize(), "", nil)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListApprovalPoliciesResponse{}
	if !s.canRead(a) {
		return resp, nil
	}
	var after int64
	if err := store.DecodePageToken(req.GetPageToken(), "policies", &after); err != nil {
		return nil, err
	}
	q.Where("seq > " + q.Arg(after))
	list, more, err := store.FetchPage(ctx, s.Tenancy.Pool, q, `SELECT `+policyColumns+` FROM approval_policies`, "seq", scanPolicy)
	if err != nil {
		return nil, err
	}
	if more {
		resp.NextPageToken = store.EncodePageToken("policies", list[len(list)-1].Seq)
	}
	for _, p := range list {
		resp.ApprovalPolicies = append(resp.ApprovalPolicies, p.proto())
	}
	return resp, nil
}

func (s *Policies) admin(ctx context.Context) (*identity.Access, error) {
	a, err := s.Tenancy.Access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins manage approval policies")
	}
	return a, nil
}

func (s *Policies) CreateApprovalPolicy(ctx context.Context, req *pb.CreateApprovalPolicyRequest) (*pb.ApprovalPolicy, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	var v errs.Violations
	names.ValidateID(&v, "approval_policy_id", req.GetApprovalPolicyId())
	p := req.GetApprovalPolicy()
	if p == nil {
		v.Add("approval_policy", "required")
		return nil, v.Err()
	}
	if len(p.GetDisplayName()) > 256 {
		v.Add("approval_policy.display_name", "must be at most 256 characters")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if _, err := policy.Compile(p.GetExpression()); err != nil {
		return nil, err
	}
	var out *pb.ApprovalPolicy
	err = store.InTx(ctx, s.Tenancy.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		out, err = tenancy.Idempotent(ctx, tx, a.Principal.Subject, "CreateApprovalPolicy", req.GetRequestId(), req,
			func() *pb.ApprovalPolicy { return &pb.ApprovalPolicy{} },
			func() (*pb.ApprovalPolicy, error) {
				row, err := scanPolicy(tx.QueryRow(ctx, `INSERT INTO approval_policies (id, display_name, expression, disabled)
					VALUES ($1, $2, $3, $4) RETURNING `+policyColumns, req.GetApprovalPolicyId(), p.GetDisplayName(), p.GetExpression(), p.GetDisabled()))
				if store.SQLState(err) == "23505" {
					return nil, errs.AlreadyExists(names.ApprovalPolicy(req.GetApprovalPolicyId()))
				}
				if err != nil {
					return nil, err
				}
				res := row.proto()
				return res, audit.Record(ctx, tx, audit.Event{Actor: a.Principal, Action: "CreateApprovalPolicy", Resource: res.Name,
					RequestID: req.GetRequestId(), CorrelationID: s.Tenancy.CorrelationID(ctx), After: res})
			})
		return err
	})
	return out, err
}

func (s *Policies) UpdateApprovalPolicy(ctx context.Context, req *pb.UpdateApprovalPolicyRequest) (*pb.ApprovalPolicy, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	p := req.GetApprovalPolicy()
	if p == nil {
		return nil, errs.InvalidField("approval_policy", "required")
	}
	paths := map[string]bool{}
	mask := req.GetUpdateMask().GetPaths()
	if len(mask) == 0 || (len(mask) == 1 && mask[0] == "*") {
		mask = []string{"display_name", "expression", "disabled"}
	}
	for _, m := range mask {
		switch m {
		case "display_name", "expression", "disabled":
			paths[m] = true
		default:
			return nil, errs.InvalidField("update_mask", "path %q cannot be updated; updatable: display_name, expression, disabled", m)
		}
	}
	if paths["expression"] {
		if _, err := policy.Compile(p.GetExpression()); err != nil {
			return nil, err
		}
	}
	var out *pb.ApprovalPolicy
	err = store.InTx(ctx, s.Tenancy.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := s.get(ctx, tx, p.GetName(), true)
		if err != nil {
			return err
		}
		before := cur.proto()
		if err := tenancy.CheckEtag(p.GetName(), p.GetEtag(), before.Etag); err != nil {
			return err
		}
		if paths["display_name"] {
			cur.DisplayName = p.GetDisplayName()
		}
		if paths["expression"] {
			cur.Expression = p.GetExpression()
		}
		if paths["disabled"] {
			cur.Disabled = p.GetDisabled()
		}
		row, err := scanPolicy(tx.QueryRow(ctx, `UPDATE approval_policies SET display_name = $2, expression = $3, disabled = $4,
			version = version + 1, update_time = now() WHERE id = $1 RETURNING `+policyColumns, cur.ID, cur.DisplayName, cur.Expression, cur.Disabled))
		if err != nil {
			return err
		}
		out = row.proto()
		return audit.Record(ctx, tx, audit.Event{Actor: a.Principal, Action: "UpdateApprovalPolicy", Resource: out.Name,
			CorrelationID: s.Tenancy.CorrelationID(ctx), Before: before, After: out})
	})
	return out, err
}

func (s *Policies) DeleteApprovalPolicy(ctx context.Context, req *pb.DeleteApprovalPolicyRequest) (*emptypb.Empty, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	err = store.InTx(ctx, s.Tenancy.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := s.get(ctx, tx, req.GetName(), true)
		if err != nil {
			return err
		}
		before := cur.proto()
		if err := tenancy.CheckEtag(req.GetName(), req.GetEtag(), before.Etag); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM approval_policies WHERE id = $1`, cur.ID); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{Actor: a.Principal, Action: "DeleteApprovalPolicy", Resource: req.GetName(),
			CorrelationID: s.Tenancy.CorrelationID(ctx), Before: before})
	})
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}
