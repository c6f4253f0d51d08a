package api

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// Every authenticated caller may read host clusters (placement names them
// and their labels); platform admins manage them and alone see how each is
// reached.

func (s *HostClusters) admin(ctx context.Context) (*identity.Access, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins manage host clusters")
	}
	return a, nil
}

// hostClusterView is a host cluster with what the API shows beside it.
type hostClusterView struct {
	h        fleet.HostCluster
	assigned map[string]quota.Resources
	hosted   int64
	admin    bool
}

func (s *HostClusters) view(ctx context.Context, q store.Querier, a *identity.Access, h fleet.HostCluster, hosted map[string]int64) (hostClusterView, error) {
	assigned, err := fleet.Assigned(ctx, q, h)
	if err != nil {
		return hostClusterView{}, err
	}
	return hostClusterView{h: h, assigned: assigned, hosted: hosted[h.ID], admin: a.PlatformAdmin}, nil
}

// GetHostCluster implements pb.HostClusterServiceServer.
func (s *HostClusters) GetHostCluster(ctx context.Context, req *pb.GetHostClusterRequest) (*pb.HostCluster, error) {
	id, err := names.ParseHostCluster("name", req.GetName())
	if err != nil {
		return nil, err
	}
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	h, err := fleet.Get(ctx, s.db, id, false)
	if err != nil {
		return nil, err
	}
	hosted, err := virtualcluster.CountByHostCluster(ctx, s.db)
	if err != nil {
		return nil, err
	}
	v, err := s.view(ctx, s.db, a, h, hosted)
	if err != nil {
		return nil, err
	}
	return hostClusterToProto(v), nil
}

// ListHostClusters implements pb.HostClusterServiceServer.
func (s *HostClusters) ListHostClusters(ctx context.Context, req *pb.ListHostClustersRequest) (*pb.ListHostClustersResponse, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	hosted, err := virtualcluster.CountByHostCluster(ctx, s.db)
	if err != nil {
		return nil, err
	}
	var views []hostClusterView
	list, next, err := page(req.GetPageToken(), "hostclusters", "", idCursor,
		func(after string) ([]fleet.HostCluster, bool, error) {
			return fleet.List(ctx, s.db, fleet.ListOptions{PageSize: req.GetPageSize(), After: after})
		},
		func(h fleet.HostCluster) string { return h.ID },
		func(h fleet.HostCluster) fleet.HostCluster { return h })
	if err != nil {
		return nil, err
	}
	for _, h := range list {
		v, err := s.view(ctx, s.db, a, h, hosted)
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	out := &pb.ListHostClustersResponse{NextPageToken: next}
	for _, v := range views {
		out.HostClusters = append(out.HostClusters, hostClusterToProto(v))
	}
	return out, nil
}

// hostClusterFromProto validates what an admin sets; field is the message's
// path ("host_cluster").
func hostClusterFromProto(v *errs.Violations, field string, p *pb.HostCluster) fleet.HostCluster {
	h := fleet.HostCluster{DisplayName: p.GetDisplayName(), Labels: p.GetLabels(), Cordoned: p.GetCordoned()}
	checkDisplayName(v, field+".display_name", p.GetDisplayName())
	switch c := p.GetConnection().(type) {
	case *pb.HostCluster_InCluster:
		h.Connection.InCluster = true
	case *pb.HostCluster_KubeconfigSecret:
		h.Connection.Secret, h.Connection.Key = c.KubeconfigSecret.GetName(), c.KubeconfigSecret.GetKey()
	}
	for _, t := range p.GetTiers() {
		switch t {
		case pb.IsolationTier_SHARED, pb.IsolationTier_DEDICATED, pb.IsolationTier_SANDBOX:
			h.Tiers = append(h.Tiers, t.String())
		default:
			v.Add(field+".tiers", "%s is not an isolation tier a host cluster can take; use SHARED, DEDICATED or SANDBOX", t)
		}
	}
	return h
}

// CreateHostCluster implements pb.HostClusterServiceServer.
func (s *HostClusters) CreateHostCluster(ctx context.Context, req *pb.CreateHostClusterRequest) (*pb.HostCluster, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	var v errs.Violations
	names.ValidateID(&v, "host_cluster_id", req.GetHostClusterId())
	p := req.GetHostCluster()
	if p == nil {
		v.Add("host_cluster", "required")
		return nil, v.Err()
	}
	if p.GetConnection() == nil {
		v.Add("host_cluster.connection", "required: set in_cluster (the cluster gpuplane runs in) or kubeconfig_secret")
	}
	h := hostClusterFromProto(&v, "host_cluster", p)
	h.ID = req.GetHostClusterId()
	v = append(v, fleet.Validate(h, "host_cluster")...)
	if err := v.Err(); err != nil {
		return nil, err
	}
	return create(ctx, s.db, "", a.Principal.Subject, "CreateHostCluster", req.GetRequestId(), req,
		func() *pb.HostCluster { return &pb.HostCluster{} },
		func(ctx context.Context, tx *store.Tx) (*pb.HostCluster, error) {
			row, err := s.fleet.Create(ctx, tx, a.Principal, req.GetRequestId(), h)
			if err != nil {
				return nil, err
			}
			return hostClusterToProto(hostClusterView{h: row, admin: true}), nil
		})
}

// UpdateHostCluster implements pb.HostClusterServiceServer.
func (s *HostClusters) UpdateHostCluster(ctx context.Context, req *pb.UpdateHostClusterRequest) (*pb.HostCluster, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	p := req.GetHostCluster()
	if p == nil {
		return nil, errs.InvalidField("host_cluster", "required")
	}
	id, err := names.ParseHostCluster("host_cluster.name", p.GetName())
	if err != nil {
		return nil, err
	}
	paths, err := maskPaths(req.GetUpdateMask().GetPaths(), "display_name", "tiers", "labels", "cordoned", "in_cluster", "kubeconfig_secret")
	if err != nil {
		return nil, err
	}
	var v errs.Violations
	body := hostClusterFromProto(&v, "host_cluster", p)
	if paths["in_cluster"] && paths["kubeconfig_secret"] && p.GetConnection() == nil && len(req.GetUpdateMask().GetPaths()) > 0 {
		v.Add("host_cluster.connection", "set in_cluster or kubeconfig_secret to change how the host cluster is reached")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*pb.HostCluster, error) {
		row, err := s.fleet.Update(ctx, tx, a.Principal, id, p.GetEtag(), func(next *fleet.HostCluster) {
			if paths["display_name"] {
				next.DisplayName = body.DisplayName
			}
			if paths["tiers"] {
				next.Tiers = body.Tiers
			}
			if paths["labels"] {
				next.Labels = maps.Clone(body.Labels)
			}
			if paths["cordoned"] {
				next.Cordoned = body.Cordoned
			}
			// The connection changes only when the body sets one (a whole-object
			// PATCH from a reader who may not see the Secret keeps it).
			if (paths["in_cluster"] || paths["kubeconfig_secret"]) && p.GetConnection() != nil {
				next.Connection = body.Connection
			}
		})
		if err != nil {
			return nil, err
		}
		return hostClusterToProto(hostClusterView{h: row, admin: true}), nil
	})
}

// DeleteHostCluster implements pb.HostClusterServiceServer.
func (s *HostClusters) DeleteHostCluster(ctx context.Context, req *pb.DeleteHostClusterRequest) (*emptypb.Empty, error) {
	a, err := s.admin(ctx)
	if err != nil {
		return nil, err
	}
	id, err := names.ParseHostCluster("name", req.GetName())
	if err != nil {
		return nil, err
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*emptypb.Empty, error) {
		return &emptypb.Empty{}, s.fleet.Delete(ctx, tx, a.Principal, id, req.GetEtag())
	})
}

// unreachableForReaders replaces why a host cluster is unreachable for
// callers who are not platform admins.
const unreachableForReaders = "the host cluster cannot be reached; platform admins see why"

func hostClusterToProto(v hostClusterView) *pb.HostCluster {
	h := v.h
	out := &pb.HostCluster{
		Name: h.Name(), DisplayName: h.DisplayName, Labels: h.Labels, Cordoned: h.Cordoned,
		Etag: h.Etag(), CreateTime: ts(h.Created), UpdateTime: ts(h.Updated),
	}
	switch {
	case h.Connection.InCluster:
		out.Connection = &pb.HostCluster_InCluster{InCluster: &pb.InCluster{}}
	case v.admin:
		out.Connection = &pb.HostCluster_KubeconfigSecret{KubeconfigSecret: &pb.SecretReference{Name: h.Connection.Secret, Key: h.Connection.Key}}
	}
	for _, t := range h.Tiers {
		out.Tiers = append(out.Tiers, pb.IsolationTier(pb.IsolationTier_value[t]))
	}
	st := h.Status
	out.Status = &pb.HostClusterStatus{
		Reachable: st.Reachable, KubernetesVersion: st.KubernetesVersion, KaiVersion: st.KAIVersion,
		Conditions: conditionsToProto(st.Conditions), Message: st.Message,
		ObserveTime: tsPtr(st.ObserveTime), UnreachableSince: tsPtr(st.UnreachableSince), VirtualClusters: int32(v.hosted),
	}
	if !v.admin && !st.Reachable {
		// Why a host cluster cannot be reached names how it is reached (its
		// kubeconfig Secret, its API server's address): only platform
		// admins read that.
		if out.Status.Message != "" {
			out.Status.Message = unreachableForReaders
		}
		for _, c := range out.Status.Conditions {
			if c.GetType() == fleet.CondReachable && c.GetMessage() != "" {
				c.Message = unreachableForReaders
			}
		}
	}
	pools := slices.Clone(st.Pools)
	slices.SortFunc(pools, func(a, b fleet.PoolStatus) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	for _, p := range pools {
		out.Status.NodePools = append(out.Status.NodePools, &pb.NodePoolStatus{Name: p.Name, Nodes: int32(p.Nodes),
			Capacity: quotaToProto(p.Capacity), Assigned: quotaToProto(v.assigned[p.Name])})
	}
	return out
}
