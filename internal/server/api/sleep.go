package api

import (
	"context"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// SleepVirtualCluster implements pb.VirtualClusterServiceServer.
func (s *VirtualClusters) SleepVirtualCluster(ctx context.Context, req *pb.SleepVirtualClusterRequest) (*pb.VirtualCluster, error) {
	return s.setSleep(ctx, req.GetName(), req.GetEtag(), true)
}

// WakeVirtualCluster implements pb.VirtualClusterServiceServer.
func (s *VirtualClusters) WakeVirtualCluster(ctx context.Context, req *pb.WakeVirtualClusterRequest) (*pb.VirtualCluster, error) {
	return s.setSleep(ctx, req.GetName(), req.GetEtag(), false)
}

// setSleep: team owners and department (and platform) admins may put a
// virtual cluster to sleep and wake it; other team members see
// PERMISSION_DENIED (they may ask with a request), everyone else
// NOT_FOUND.
func (s *VirtualClusters) setSleep(ctx context.Context, name, etag string, sleep bool) (*pb.VirtualCluster, error) {
	teamID, vcID, err := names.ParseVirtualCluster("name", name)
	if err != nil {
		return nil, err
	}
	team, a, err := s.readableTeam(ctx, "name", names.Team(teamID))
	if err != nil {
		if errs.KindOf(err) == errs.KindNotFound {
			return nil, errs.NotFound(name)
		}
		return nil, err
	}
	v, err := virtualcluster.Get(ctx, s.db, vcID, false)
	if err != nil || v.Team != teamID || v.Phase.IsGone() {
		return nil, errs.NotFound(name)
	}
	if !a.CanRequest(team.ID, team.Department) {
		what := "put to sleep"
		if !sleep {
			what = "wake"
		}
		return nil, errs.PermissionDenied("only owners of team %s and admins of department %s may %s %s; ask with a request instead",
			team.ID, team.Department, what, name)
	}
	out, err := s.requests.SetSleep(ctx, a.Principal, vcID, etag, sleep)
	if err != nil {
		return nil, err
	}
	return virtualClusterToProto(out), nil
}
