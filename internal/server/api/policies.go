package api

import (
	"context"

	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/policy"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
)

// Platform admins manage approval policies; department admins may read
// them (they decide the requests the policies did not).
func canReadPolicies(a *identity.Access) bool { return a.PlatformAdmin || len(a.AdminOf) > 0 }

// GetApprovalPolicy implements pb.ApprovalPolicyServiceServer.
func (s *Policies) GetApprovalPolicy(ctx context.Context, req *pb.GetApprovalPolicyRequest) (*pb.ApprovalPolicy, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	if !canReadPolicies(a) {
		return nil, errs.NotFound(req.GetName())
	}
	id, err := names.ParseApprovalPolicy("name", req.GetName())
	if err != nil {
		return nil, err
	}
	p, err := request.GetPolicy(ctx, s.db, id, false)
	if err != nil {
		return nil, err
	}
	return policyToProto(p), nil
}

// ListApprovalPolicies implements pb.ApprovalPolicyServiceServer.
func (s *Policies) ListApprovalPolicies(ctx context.Context, req *pb.ListApprovalPoliciesRequest) (*pb.ListApprovalPoliciesResponse, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := store.PageSize(req.GetPageSize()); err != nil {
		return nil, err
	}
	if !canReadPolicies(a) {
		return &pb.ListApprovalPoliciesResponse{}, nil
	}
	list, next, err := page(req.GetPageToken(), "policies", int64(0), nil,
		func(after int64) ([]request.Policy, bool, error) {
			return request.ListPolicies(ctx, s.db, req.GetPageSize(), after)
		},
		func(p request.Policy) int64 { return p.Seq }, policyToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListApprovalPoliciesResponse{ApprovalPolicies: list, NextPageToken: next}, nil
}

func (s *Policies) admin(ctx context.Context) (*identity.Access, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins manage approval policies")
	}
	return a, nil
}

// CreateApprovalPolicy implements pb.ApprovalPolicyServiceServer.
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
	return create(ctx, s.db, "", a.Principal.Subject, "CreateApprovalPolicy", req.GetRequestId(), req,
		func() *pb.ApprovalPolicy { return &pb.ApprovalPolicy{} },
		func(ctx context.Context, tx *store.Tx) (*pb.ApprovalPolicy, error) {
			row, err := request.CreatePolicy(ctx, tx, a.Principal, req.GetRequestId(), request.Policy{
				ID: req.GetApprovalPolicyId(), DisplayName: p.GetDisplayName(), Expression: p.GetExpression(), Disabled: p.GetDisabled()})
			if err != nil {
				return nil, err
			}
			return policyToProto(row), nil
		})
}

// UpdateApprovalPolicy implements pb.ApprovalPolicyServiceServer.
func (s *Policies) UpdateApprovalPolicy(ctx context.Context, req *pb.UpdateApprovalPolicyRequest) (*pb.ApprovalPolicy, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	p := req.GetApprovalPolicy()
	if p == nil {
		return nil, errs.InvalidField("approval_policy", "required")
	}
	paths, err := maskPaths(req.GetUpdateMask().GetPaths(), "display_name", "expression", "disabled")
	if err != nil {
		return nil, err
	}
	if paths["expression"] {
		if _, err := policy.Compile(p.GetExpression()); err != nil {
			return nil, err
		}
	}
	id, err := names.ParseApprovalPolicy("name", p.GetName())
	if err != nil {
		return nil, err
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*pb.ApprovalPolicy, error) {
		row, err := request.UpdatePolicy(ctx, tx, a.Principal, id, p.GetEtag(), func(next *request.Policy) {
			if paths["display_name"] {
				next.DisplayName = p.GetDisplayName()
			}
			if paths["expression"] {
				next.Expression = p.GetExpression()
			}
			if paths["disabled"] {
				next.Disabled = p.GetDisabled()
			}
		})
		if err != nil {
			return nil, err
		}
		return policyToProto(row), nil
	})
}

// DeleteApprovalPolicy implements pb.ApprovalPolicyServiceServer.
func (s *Policies) DeleteApprovalPolicy(ctx context.Context, req *pb.DeleteApprovalPolicyRequest) (*emptypb.Empty, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	id, err := names.ParseApprovalPolicy("name", req.GetName())
	if err != nil {
		return nil, err
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*emptypb.Empty, error) {
		return &emptypb.Empty{}, request.DeletePolicy(ctx, tx, a.Principal, id, req.GetEtag())
	})
}
