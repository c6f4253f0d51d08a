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

func validRole(r pb.TeamRole) bool {
	return r == pb.TeamRole_OWNER || r == pb.TeamRole_MEMBER || r == pb.TeamRole_VIEWER
}

// readableMember returns the member, its team and the caller's access, or
// NOT_FOUND when the caller cannot read the team.
func (s *Members) readableMember(ctx context.Context, name string) (tenancy.Team, tenancy.Member, *identity.Access, error) {
	teamID, memberID, err := names.ParseMember("name", name)
	if err != nil {
		return tenancy.Team{}, tenancy.Member{}, nil, err
	}
	t, a, err := s.readableTeam(ctx, "name", names.Team(teamID))
	if err != nil {
		if errs.KindOf(err) == errs.KindNotFound {
			return t, tenancy.Member{}, nil, errs.NotFound(name)
		}
		return t, tenancy.Member{}, nil, err
	}
	m, err := tenancy.GetMember(ctx, s.db, teamID, memberID, false)
	return t, m, a, err
}

// GetMember implements pb.MemberServiceServer.
func (s *Members) GetMember(ctx context.Context, req *pb.GetMemberRequest) (*pb.Member, error) {
	_, m, _, err := s.readableMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return memberToProto(m), nil
}

// ListMembers implements pb.MemberServiceServer.
func (s *Members) ListMembers(ctx context.Context, req *pb.ListMembersRequest) (*pb.ListMembersResponse, error) {
	t, _, err := s.readableTeam(ctx, "parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	list, next, err := page(req.GetPageToken(), "members|"+req.GetParent()+"|"+req.GetFilter(), "", idCursor,
		func(after string) ([]tenancy.Member, bool, error) {
			return tenancy.ListMembers(ctx, s.db, t.ID, tenancy.ListOptions{PageSize: req.GetPageSize(), Filter: req.GetFilter(), After: after})
		},
		func(m tenancy.Member) string { return m.ID }, memberToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListMembersResponse{Members: list, NextPageToken: next}, nil
}

// CreateMember implements pb.MemberServiceServer.
func (s *Members) CreateMember(ctx context.Context, req *pb.CreateMemberRequest) (*pb.Member, error) {
	t, a, err := s.readableTeam(ctx, "parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if !a.CanManageMembers(t.ID, t.Department) {
		return nil, errs.PermissionDenied("only owners of %s and department admins manage its members", req.GetParent())
	}
	var v errs.Violations
	m := req.GetMember()
	if m == nil {
		v.Add("member", "required")
		return nil, v.Err()
	}
	var kind tenancy.PrincipalKind
	principal := ""
	switch p := m.GetPrincipal().(type) {
	case *pb.Member_User:
		kind, principal = tenancy.KindUser, strings.TrimSpace(p.User)
	case *pb.Member_Group:
		kind, principal = tenancy.KindGroup, strings.TrimSpace(p.Group)
	default:
		v.Add("member.user", "set exactly one of member.user or member.group")
	}
	if kind != "" && (principal == "" || len(principal) > 256 || strings.ContainsRune(principal, 0)) {
		v.Add("member."+string(kind), "must be 1 to 256 characters, without NUL")
	}
	if !validRole(m.GetRole()) {
		v.Add("member.role", "must be OWNER, MEMBER or VIEWER")
	}
	// member_id is optional: when empty it is derived from the principal
	// (and a missing principal has its own violation already).
	id := req.GetMemberId()
	switch {
	case id != "":
		names.ValidateID(&v, "member_id", id)
	case kind != "":
		id = tenancy.DerivedMemberID(kind, principal)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return create(ctx, s.db, "", a.Principal.Subject, "CreateMember", req.GetRequestId(), req,
		func() *pb.Member { return &pb.Member{} },
		func(ctx context.Context, tx *store.Tx) (*pb.Member, error) {
			row, err := s.tenancy.CreateMember(ctx, tx, a.Principal, req.GetRequestId(), t.Department, tenancy.Member{
				Team: t.ID, ID: id, Kind: kind, Principal: principal, Role: tenancy.Role(m.GetRole().String())})
			if err != nil {
				return nil, err
			}
			return memberToProto(row), nil
		})
}

// UpdateMember implements pb.MemberServiceServer.
func (s *Members) UpdateMember(ctx context.Context, req *pb.UpdateMemberRequest) (*pb.Member, error) {
	m := req.GetMember()
	if m == nil {
		return nil, errs.InvalidField("member", "required")
	}
	t, cur, a, err := s.readableMember(ctx, m.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageMembers(t.ID, t.Department) {
		return nil, errs.PermissionDenied("only owners of %s and department admins manage its members", names.Team(t.ID))
	}
	if _, err := maskPaths(req.GetUpdateMask().GetPaths(), "role"); err != nil {
		return nil, err
	}
	if !validRole(m.GetRole()) {
		return nil, errs.InvalidField("member.role", "must be OWNER, MEMBER or VIEWER")
	}
	mask := req.GetUpdateMask().GetPaths()
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*pb.Member, error) {
		row, err := s.tenancy.UpdateMember(ctx, tx, a.Principal, t.Department, t.ID, cur.ID, m.GetEtag(), tenancy.Role(m.GetRole().String()),
			func(cur tenancy.Member) error {
				before := memberToProto(cur)
				if ((m.GetUser() != "" || slices.Contains(mask, "user")) && m.GetUser() != before.GetUser()) ||
					((m.GetGroup() != "" || slices.Contains(mask, "group")) && m.GetGroup() != before.GetGroup()) {
					return errs.InvalidField("member.user", "a member's user or group cannot change; delete the member and create a new one")
				}
				return nil
			})
		if err != nil {
			return nil, err
		}
		return memberToProto(row), nil
	})
}

// DeleteMember implements pb.MemberServiceServer.
func (s *Members) DeleteMember(ctx context.Context, req *pb.DeleteMemberRequest) (*emptypb.Empty, error) {
	t, cur, a, err := s.readableMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageMembers(t.ID, t.Department) {
		return nil, errs.PermissionDenied("only owners of %s and department admins manage its members", names.Team(t.ID))
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*emptypb.Empty, error) {
		return &emptypb.Empty{}, s.tenancy.DeleteMember(ctx, tx, a.Principal, t.Department, t.ID, cur.ID, req.GetEtag())
	})
}
