package api

import (
	"context"
	"slices"

	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

func parseTier(v *errs.Violations, field string, tier pb.IsolationTier, required bool) tenancy.Tier {
	switch tier {
	case pb.IsolationTier_SHARED, pb.IsolationTier_DEDICATED:
		return tenancy.Tier(tier.String())
	case pb.IsolationTier_ISOLATION_TIER_UNSPECIFIED:
		if required {
			return tenancy.TierShared
		}
	}
	v.Add(field, "must be SHARED or DEDICATED")
	return ""
}

// GetTeam implements pb.TeamServiceServer.
func (s *Teams) GetTeam(ctx context.Context, req *pb.GetTeamRequest) (*pb.Team, error) {
	t, _, err := s.readableTeam(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	return teamToProto(t), nil
}

// ListTeams implements pb.TeamServiceServer.
func (s *Teams) ListTeams(ctx context.Context, req *pb.ListTeamsRequest) (*pb.ListTeamsResponse, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	list, next, err := page(req.GetPageToken(), "teams|"+req.GetFilter(), "", idCursor,
		func(after string) ([]tenancy.Team, bool, error) {
			return tenancy.ListTeams(ctx, s.db, tenancy.ListOptions{PageSize: req.GetPageSize(), Filter: req.GetFilter(), After: after, Scope: readScope(a)})
		},
		func(t tenancy.Team) string { return t.ID }, teamToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListTeamsResponse{Teams: list, NextPageToken: next}, nil
}

// CreateTeam implements pb.TeamServiceServer.
func (s *Teams) CreateTeam(ctx context.Context, req *pb.CreateTeamRequest) (*pb.Team, error) {
	var v errs.Violations
	names.ValidateID(&v, "team_id", req.GetTeamId())
	t := req.GetTeam()
	if t == nil {
		v.Add("team", "required")
		return nil, v.Err()
	}
	dept, derr := names.ParseDepartment("team.department", t.GetDepartment())
	if derr != nil {
		de, _ := errs.As(derr)
		v = append(v, de.Violations...)
	}
	checkDisplayName(&v, "team.display_name", t.GetDisplayName())
	tier := parseTier(&v, "team.isolation_tier", t.GetIsolationTier(), true)
	pool, customPool := tenancy.ResolvePool(&v, "team.node_pool", tier, req.GetTeamId(), t.GetNodePool())
	q := quotaFromProto(&v, "team.quota", t.GetQuota())
	autoSleep := autoSleepFromProto(&v, "team.auto_sleep_after", t.GetAutoSleepAfter())
	if tier.WholeGPUsOnly() && !q.GPU.IsWhole() {
		v.Add("team.quota.gpu", "DEDICATED teams get whole GPUs only (got %s): KAI does not isolate GPU memory", q.GPU)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.CanReadDepartment(dept) {
		return nil, errs.NotFound(t.GetDepartment())
	}
	if !a.CanManageTeam(dept) {
		return nil, errs.PermissionDenied("only platform admins and admins of %s create teams in it", t.GetDepartment())
	}
	if customPool && !a.PlatformAdmin {
		return nil, tenancy.CustomPoolDenied(req.GetTeamId())
	}
	team := tenancy.Team{ID: req.GetTeamId(), Department: dept, DisplayName: t.GetDisplayName(), Tier: tier, Pool: pool, Quota: q, AutoSleepAfter: autoSleep}
	// A team without quota takes no department lock: nothing to read ahead.
	var p *store.Prefetch
	var ahead *tenancy.TeamChange
	if !q.IsZero() {
		p, ahead = tenancy.TeamChanges, tenancy.NewTeamCreate(team)
	}
	return createAhead(ctx, s.db, tenancy.DepartmentGroup(dept), p, ahead, a.Principal.Subject, "CreateTeam", req.GetRequestId(), req,
		func() *pb.Team { return &pb.Team{} },
		func(ctx context.Context, tx *store.Tx) (*pb.Team, error) {
			row, err := s.tenancy.CreateTeamAhead(ctx, tx, a.Principal, req.GetRequestId(), team, ahead)
			if err != nil {
				return nil, err
			}
			return teamToProto(row), nil
		})
}

// UpdateTeam implements pb.TeamServiceServer.
func (s *Teams) UpdateTeam(ctx context.Context, req *pb.UpdateTeamRequest) (*pb.Team, error) {
	t := req.GetTeam()
	if t == nil {
		return nil, errs.InvalidField("team", "required")
	}
	cur, a, err := s.readableTeam(ctx, "team.name", t.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageTeam(cur.Department) {
		return nil, errs.PermissionDenied("only platform admins and department admins change teams; team owners ask through a CHANGE_TEAM_QUOTA request")
	}
	paths, err := maskPaths(req.GetUpdateMask().GetPaths(), "display_name", "isolation_tier", "quota", "node_pool", "auto_sleep_after")
	if err != nil {
		return nil, err
	}
	var v errs.Violations
	checkDisplayName(&v, "team.display_name", t.GetDisplayName())
	var tier tenancy.Tier
	if paths["isolation_tier"] {
		tier = parseTier(&v, "team.isolation_tier", t.GetIsolationTier(), false)
	}
	q := quotaFromProto(&v, "team.quota", t.GetQuota())
	autoSleep := autoSleepFromProto(&v, "team.auto_sleep_after", t.GetAutoSleepAfter())
	if err := v.Err(); err != nil {
		return nil, err
	}
	ahead := tenancy.NewTeamUpdate(cur.Department, cur.ID)
	return mutateAhead(ctx, s.db, tenancy.DepartmentGroup(cur.Department), tenancy.TeamChanges, ahead, func(ctx context.Context, tx *store.Tx) (*pb.Team, error) {
		row, err := s.tenancy.UpdateTeamAhead(ctx, tx, a.Principal, cur.ID, cur.Department, t.GetEtag(), paths["quota"], func(cur tenancy.Team, next *tenancy.Team) error {
			if dept := names.Department(cur.Department); (t.GetDepartment() != "" || slices.Contains(req.GetUpdateMask().GetPaths(), "department")) && t.GetDepartment() != dept {
				return errs.InvalidField("team.department", "a team cannot move to another department (it is %s)", dept)
			}
			if paths["display_name"] {
				next.DisplayName = t.GetDisplayName()
			}
			if paths["auto_sleep_after"] {
				next.AutoSleepAfter = autoSleep
			}
			if paths["isolation_tier"] {
				next.Tier = tier
			}
			if paths["quota"] {
				next.Quota = maskedQuota(paths, "quota", cur.Quota, q)
			}
			if paths["node_pool"] || next.Tier != cur.Tier {
				// The pool follows the tier unless node_pool names one.
				asked := ""
				if paths["node_pool"] {
					asked = t.GetNodePool()
				}
				var v errs.Violations
				pool, custom := tenancy.ResolvePool(&v, "team.node_pool", next.Tier, cur.ID, asked)
				if err := v.Err(); err != nil {
					return err
				}
				if custom && pool != cur.Pool && !a.PlatformAdmin {
					return tenancy.CustomPoolDenied(cur.ID)
				}
				next.Pool = pool
			}
			return nil
		}, ahead)
		if err != nil {
			return nil, err
		}
		return teamToProto(row), nil
	})
}

// DeleteTeam implements pb.TeamServiceServer.
func (s *Teams) DeleteTeam(ctx context.Context, req *pb.DeleteTeamRequest) (*emptypb.Empty, error) {
	cur, a, err := s.readableTeam(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageTeam(cur.Department) {
		return nil, errs.PermissionDenied("only platform admins and department admins delete teams")
	}
	return mutate(ctx, s.db, tenancy.DepartmentGroup(cur.Department), func(ctx context.Context, tx *store.Tx) (*emptypb.Empty, error) {
		return &emptypb.Empty{}, s.tenancy.DeleteTeam(ctx, tx, a.Principal, cur.ID, cur.Department, req.GetEtag())
	})
}
