package api

import (
	"context"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// GetVirtualCluster implements pb.VirtualClusterServiceServer.
func (s *VirtualClusters) GetVirtualCluster(ctx context.Context, req *pb.GetVirtualClusterRequest) (*pb.VirtualCluster, error) {
	teamID, vcID, err := names.ParseVirtualCluster("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if _, _, err := s.readableTeam(ctx, "name", names.Team(teamID)); err != nil {
		if errs.KindOf(err) == errs.KindNotFound {
			return nil, errs.NotFound(req.GetName())
		}
		return nil, err
	}
	v, err := virtualcluster.GetOfTeam(ctx, s.db, teamID, vcID)
	if err != nil {
		if errs.KindOf(err) != errs.KindNotFound {
			return nil, err
		}
		return nil, errs.NotFound(req.GetName())
	}
	return virtualClusterToProto(v), nil
}

// ListVirtualClusters implements pb.VirtualClusterServiceServer; parent
// "teams/-" lists every team the caller may read.
func (s *VirtualClusters) ListVirtualClusters(ctx context.Context, req *pb.ListVirtualClustersRequest) (*pb.ListVirtualClustersResponse, error) {
	o := virtualcluster.ListOptions{PageSize: req.GetPageSize(), Filter: req.GetFilter()}
	// Page size and filter are checked before access, as they always were.
	if err := virtualcluster.CheckList(o); err != nil {
		return nil, err
	}
	scope := "vcs|" + req.GetParent() + "|" + req.GetFilter()
	var after virtualcluster.Cursor
	if err := store.DecodePageToken(req.GetPageToken(), scope, &after); err != nil {
		return nil, err
	}
	if req.GetParent() == "teams/-" {
		a, err := s.access(ctx)
		if err != nil {
			return nil, err
		}
		o.Scope = readScope(a)
	} else {
		t, _, err := s.readableTeam(ctx, "parent", req.GetParent())
		if err != nil {
			return nil, err
		}
		o.Team = t.ID
	}
	list, next, err := page(req.GetPageToken(), scope, virtualcluster.Cursor{}, vcCursor,
		func(after virtualcluster.Cursor) ([]virtualcluster.VirtualCluster, bool, error) {
			o.After = after
			return virtualcluster.List(ctx, s.db, o)
		},
		virtualcluster.CursorOf, virtualClusterToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListVirtualClustersResponse{VirtualClusters: list, NextPageToken: next}, nil
}

// vcCursor refuses a cursor that does not name an id (and a team): tokens
// are not signed.
func vcCursor(c virtualcluster.Cursor) error {
	if err := idCursor(c.ID); err != nil {
		return err
	}
	if c.Team == "" {
		return nil
	}
	return idCursor(c.Team)
}
