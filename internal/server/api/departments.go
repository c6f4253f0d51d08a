package api

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

func validateGroups(v *errs.Violations, field string, groups []string) []string {
	out := make([]string, 0, len(groups))
	for i, g := range groups {
		g = strings.TrimSpace(g)
		if g == "" || len(g) > 256 || strings.ContainsRune(g, 0) {
			v.Add(field, "entry %d must be 1 to 256 characters, without NUL", i)
			continue
		}
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	if len(out) > 64 {
		v.Add(field, "at most 64 groups")
	}
	return out
}

// adminOf parses a department name and lets platform admins through:
// callers who cannot read the department get NOT_FOUND, others
// PERMISSION_DENIED ("only platform admins <verb> departments").
func (s *Departments) adminOf(ctx context.Context, field, name, verb string) (string, *identity.Access, error) {
	id, err := names.ParseDepartment(field, name)
	if err != nil {
		return "", nil, err
	}
	a, err := s.access(ctx)
	if err != nil {
		return "", nil, err
	}
	if !a.CanReadDepartment(id) {
		return "", nil, errs.NotFound(name)
	}
	if !a.PlatformAdmin {
		return "", nil, errs.PermissionDenied("only platform admins %s departments", verb)
	}
	return id, a, nil
}

// GetDepartment implements pb.DepartmentServiceServer.
func (s *Departments) GetDepartment(ctx context.Context, req *pb.GetDepartmentRequest) (*pb.Department, error) {
	id, err := names.ParseDepartment("name", req.GetName())
	if err != nil {
		return nil, err
	}
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.CanReadDepartment(id) {
		return nil, errs.NotFound(req.GetName())
	}
	d, err := tenancy.GetDepartment(ctx, s.db, id, false)
	if err != nil {
		return nil, err
	}
	return departmentToProto(d), nil
}

// ListDepartments implements pb.DepartmentServiceServer.
func (s *Departments) ListDepartments(ctx context.Context, req *pb.ListDepartmentsRequest) (*pb.ListDepartmentsResponse, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	scope := store.Scope{All: a.PlatformAdmin, Departments: append(a.AdminDepartments(), a.MemberDepartments()...)}
	list, next, err := page(req.GetPageToken(), "departments|"+req.GetFilter(), "", idCursor,
		func(after string) ([]tenancy.Department, bool, error) {
			return tenancy.ListDepartments(ctx, s.db, tenancy.ListOptions{PageSize: req.GetPageSize(), Filter: req.GetFilter(), After: after, Scope: scope})
		},
		func(d tenancy.Department) string { return d.ID }, departmentToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListDepartmentsResponse{Departments: list, NextPageToken: next}, nil
}

// CreateDepartment implements pb.DepartmentServiceServer.
func (s *Departments) CreateDepartment(ctx context.Context, req *pb.CreateDepartmentRequest) (*pb.Department, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins create departments")
	}
	var v errs.Violations
	names.ValidateID(&v, "department_id", req.GetDepartmentId())
	d := req.GetDepartment()
	if d == nil {
		v.Add("department", "required")
		return nil, v.Err()
	}
	checkDisplayName(&v, "department.display_name", d.GetDisplayName())
	budget := quotaFromProto(&v, "department.quota_budget", d.GetQuotaBudget())
	groups := validateGroups(&v, "department.admin_groups", d.GetAdminGroups())
	if err := v.Err(); err != nil {
		return nil, err
	}
	return create(ctx, s.db, "", a.Principal.Subject, "CreateDepartment", req.GetRequestId(), req,
		func() *pb.Department { return &pb.Department{} },
		func(ctx context.Context, tx *store.Tx) (*pb.Department, error) {
			row, err := s.tenancy.CreateDepartment(ctx, tx, a.Principal, req.GetRequestId(), tenancy.Department{
				ID: req.GetDepartmentId(), DisplayName: d.GetDisplayName(), Budget: budget, AdminGroups: groups,
				// Separation of duties is on unless the platform admin says otherwise.
				RequesterCannotDecide: d.RequesterCannotDecide == nil || d.GetRequesterCannotDecide(),
				SleepingKeepsQuota:    d.SleepingKeepsQuota == nil || d.GetSleepingKeepsQuota()})
			if err != nil {
				return nil, err
			}
			return departmentToProto(row), nil
		})
}

// UpdateDepartment implements pb.DepartmentServiceServer.
func (s *Departments) UpdateDepartment(ctx context.Context, req *pb.UpdateDepartmentRequest) (*pb.Department, error) {
	d := req.GetDepartment()
	if d == nil {
		return nil, errs.InvalidField("department", "required")
	}
	id, a, err := s.adminOf(ctx, "department.name", d.GetName(), "change")
	if err != nil {
		return nil, err
	}
	paths, err := maskPaths(req.GetUpdateMask().GetPaths(), "display_name", "quota_budget", "admin_groups", "requester_cannot_decide", "sleeping_keeps_quota")
	if err != nil {
		return nil, err
	}
	// Without a mask (every field) an absent setting is left as it is.
	if d.RequesterCannotDecide == nil {
		if slices.Contains(req.GetUpdateMask().GetPaths(), "requester_cannot_decide") {
			return nil, errs.InvalidField("department.requester_cannot_decide", "required when the update mask names it")
		}
		delete(paths, "requester_cannot_decide")
	}
	var v errs.Violations
	checkDisplayName(&v, "department.display_name", d.GetDisplayName())
	budget := quotaFromProto(&v, "department.quota_budget", d.GetQuotaBudget())
	groups := validateGroups(&v, "department.admin_groups", d.GetAdminGroups())
	if err := v.Err(); err != nil {
		return nil, err
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*pb.Department, error) {
		row, err := s.tenancy.UpdateDepartment(ctx, tx, a.Principal, id, d.GetEtag(), paths["quota_budget"], func(next *tenancy.Department) {
			if paths["display_name"] {
				next.DisplayName = d.GetDisplayName()
			}
			if paths["admin_groups"] {
				next.AdminGroups = groups
			}
			if paths["requester_cannot_decide"] {
				// Unset in a mask that names it: back to the default.
				next.RequesterCannotDecide = d.RequesterCannotDecide == nil || d.GetRequesterCannotDecide()
			}
			if paths["sleeping_keeps_quota"] {
				// Unset in a mask that names it: back to the default.
				next.SleepingKeepsQuota = d.SleepingKeepsQuota == nil || d.GetSleepingKeepsQuota()
			}
			if paths["quota_budget"] {
				next.Budget = maskedQuota(paths, "quota_budget", next.Budget, budget)
			}
		})
		if err != nil {
			return nil, err
		}
		return departmentToProto(row), nil
	})
}

// DeleteDepartment implements pb.DepartmentServiceServer.
func (s *Departments) DeleteDepartment(ctx context.Context, req *pb.DeleteDepartmentRequest) (*emptypb.Empty, error) {
	id, a, err := s.adminOf(ctx, "name", req.GetName(), "delete")
	if err != nil {
		return nil, err
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*emptypb.Empty, error) {
		return &emptypb.Empty{}, s.tenancy.DeleteDepartment(ctx, tx, a.Principal, id, req.GetEtag())
	})
}
