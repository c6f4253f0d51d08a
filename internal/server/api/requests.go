package api

import (
	"context"
	"strings"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// readableRequest returns the request when the caller may read it:
// department admins, and anyone with a role on the request's team.
func (s *Requests) readableRequest(ctx context.Context, a *identity.Access, name string) (request.Request, error) {
	id, err := names.ParseRequest("name", name)
	if err != nil {
		return request.Request{}, err
	}
	r, err := request.Get(ctx, s.db, id, false)
	if err != nil {
		return r, err
	}
	if !a.CanReadTeam(r.Team, r.Department) {
		return request.Request{}, errs.NotFound(name)
	}
	return r, nil
}

// payload validates an API request's payload for team and converts it; the
// virtual cluster it names must belong to team and be live.
// hosts are the host clusters when already read (nil: payload reads them
// if it needs them).
func (s *Requests) payload(ctx context.Context, team tenancy.Team, r *pb.Request, hosts []fleet.HostCluster) (request.Payload, string, error) {
	var v errs.Violations
	var p request.Payload
	vcID := ""
	dedicated := team.Tier.WholeGPUsOnly()
	checkGPU := func(field string, g quota.GPU) {
		if dedicated && !g.IsWhole() {
			v.Add(field, "%s is a DEDICATED team: whole GPUs only (got %s), since KAI does not isolate GPU memory", names.Team(team.ID), g)
		}
	}
	checkLimit := func(field string, lim *pb.Quota, q quota.Resources) *quota.Resources {
		if lim == nil {
			return nil
		}
		l := quotaFromProto(&v, field, lim)
		for k, want := range q.All() {
			if have := l.Get(k); have < want {
				v.Add(field+"."+k.Field(), "limit %s is below the quota %s", k.Format(have), k.Format(want))
			}
		}
		checkGPU(field+".gpu", l.GPU)
		return &l
	}
	// teamVC parses the virtual cluster a change names (field), which must
	// belong to the requesting team.
	teamVC := func(field, name string) (string, error) {
		vcTeam, id, err := names.ParseVirtualCluster(field, name)
		if err != nil {
			return "", err
		}
		if vcTeam != team.ID {
			v.Add(field, "must belong to %s", names.Team(team.ID))
			return "", v.Err()
		}
		return id, nil
	}
	// liveVC reads the virtual cluster a change names; it must be the
	// team's and live.
	liveVC := func(name, what string) (virtualcluster.VirtualCluster, error) {
		vc, err := virtualcluster.Get(ctx, s.db, vcID, false)
		if err != nil || vc.Team != team.ID {
			return vc, errs.NotFound(name)
		}
		if !vc.Phase.IsLive() {
			return vc, errs.FailedPrecondition(errs.ReasonInvalidTransition, "%s is %s"+what, name, vc.Phase)
		}
		return vc, nil
	}
	if len(r.GetJustification()) > 4096 {
		v.Add("request.justification", "must be at most 4096 characters")
	}
	switch pl := r.GetPayload().(type) {
	case *pb.Request_CreateVirtualCluster:
		c := pl.CreateVirtualCluster
		vcID = c.GetVirtualClusterId()
		names.ValidateID(&v, "request.create_virtual_cluster.virtual_cluster_id", vcID)
		if len(vcID) > virtualcluster.MaxIDLength {
			v.Add("request.create_virtual_cluster.virtual_cluster_id",
				"must be at most %d characters: the host namespace and KAI leaf queue are named vc-<id>", virtualcluster.MaxIDLength)
		}
		spec := c.GetSpec()
		if spec == nil {
			v.Add("request.create_virtual_cluster.spec", "required")
			return p, vcID, v.Err()
		}
		f := "request.create_virtual_cluster.spec"
		if len(spec.GetDisplayName()) > 256 {
			v.Add(f+".display_name", "must be at most 256 characters")
		}
		q := quotaFromProto(&v, f+".quota", spec.GetQuota())
		if spec.GetQuota() == nil || q.IsZero() {
			v.Add(f+".quota", "required: a virtual cluster needs some guaranteed GPU, CPU or memory")
		}
		checkGPU(f+".quota.gpu", q.GPU)
		limit := checkLimit(f+".limit", spec.GetLimit(), q)
		if w := spec.GetOverQuotaWeight(); w < 0 || w > 1000 {
			v.Add(f+".over_quota_weight", "must be between 0 and 1000 (0 means the default, 1)")
		}
		if pr := spec.GetPriority(); pr < 0 || pr > 1000 {
			v.Add(f+".priority", "must be between 0 and 1000 (0 means the default, 100)")
		}
		if spec.GetAllowFractionalGpus() && dedicated {
			v.Add(f+".allow_fractional_gpus", "not allowed in the DEDICATED tier: KAI does not isolate GPU memory between pods sharing a GPU")
		}
		if !q.GPU.IsWhole() && !spec.GetAllowFractionalGpus() {
			v.Add(f+".quota.gpu", "a fractional GPU quota (%s) needs allow_fractional_gpus", q.GPU)
		}
		plainVersions := checkVersionStrings(&v, f, spec.GetChartVersion(), spec.GetKubernetesVersion())
		if et := spec.GetExpireTime(); et != nil {
			if err := et.CheckValid(); err != nil {
				v.Add(f+".expire_time", "%v", err)
			} else if !et.AsTime().After(s.requests.Now()) {
				v.Add(f+".expire_time", "must be in the future")
			}
		}
		norm := virtualcluster.Spec{
			DisplayName: spec.GetDisplayName(), Quota: q, Limit: limit, OverQuotaWeight: spec.GetOverQuotaWeight(),
			Priority: spec.GetPriority(), AllowFractionalGPUs: spec.GetAllowFractionalGpus(),
			KubernetesVersion: spec.GetKubernetesVersion(), ChartVersion: spec.GetChartVersion(),
			Placement: placementFromProto(&v, f+".placement", spec.GetPlacement()),
		}
		if len(v) == 0 {
			var err error
			if hosts != nil {
				err = fleet.CheckPlacementAmong(hosts, &v, f+".placement", string(team.Tier), norm.Placement)
			} else {
				err = fleet.CheckPlacement(ctx, s.db, &v, f+".placement", string(team.Tier), norm.Placement)
			}
			if err != nil {
				return p, vcID, err
			}
		}
		if et := spec.GetExpireTime(); et != nil && et.IsValid() {
			t := et.AsTime()
			norm.ExpireTime = &t
		}
		if plainVersions {
			s.requests.NormalizeSpec(&v, f, &norm)
		}
		p.Create = &request.CreatePayload{VirtualClusterID: vcID, Spec: norm, VirtualCluster: names.VirtualCluster(team.ID, vcID)}
	case *pb.Request_ChangeVirtualClusterQuota:
		c := pl.ChangeVirtualClusterQuota
		f := "request.change_virtual_cluster_quota"
		id, err := teamVC(f+".virtual_cluster", c.GetVirtualCluster())
		if err != nil {
			return p, "", err
		}
		vcID = id
		q := quotaFromProto(&v, f+".quota", c.GetQuota())
		if c.GetQuota() == nil || q.IsZero() {
			v.Add(f+".quota", "required: the new guaranteed quota (all three resources; to give everything back, delete the virtual cluster)")
		}
		checkGPU(f+".quota.gpu", q.GPU)
		limit := checkLimit(f+".limit", c.GetLimit(), q)
		if err := v.Err(); err != nil {
			return p, vcID, err
		}
		vc, err := liveVC(c.GetVirtualCluster(), "; only a provisioned virtual cluster can be resized")
		if err != nil {
			return p, vcID, err
		}
		if !q.GPU.IsWhole() && !vc.Spec.AllowFractionalGPUs {
			v.Add(f+".quota.gpu", "a fractional GPU quota (%s) needs a virtual cluster created with allow_fractional_gpus", q.GPU)
		}
		p.ChangeVCQuota = &request.ChangeVCQuotaPayload{VirtualCluster: c.GetVirtualCluster(), Quota: q, Limit: limit, AcceptPreemption: c.GetAcceptPreemption()}
	case *pb.Request_ChangeTeamQuota:
		c := pl.ChangeTeamQuota
		f := "request.change_team_quota"
		if c.GetQuota() == nil {
			v.Add(f+".quota", "required")
		}
		q := quotaFromProto(&v, f+".quota", c.GetQuota())
		checkGPU(f+".quota.gpu", q.GPU)
		p.ChangeTeamQuota = &request.ChangeTeamQuotaPayload{Quota: q, AcceptPreemption: c.GetAcceptPreemption()}
	case *pb.Request_DeleteVirtualCluster:
		c := pl.DeleteVirtualCluster
		f := "request.delete_virtual_cluster.virtual_cluster"
		id, err := teamVC(f, c.GetVirtualCluster())
		if err != nil {
			return p, "", err
		}
		vcID = id
		if _, err := liveVC(c.GetVirtualCluster(), " and cannot be deleted now"); err != nil {
			return p, vcID, err
		}
		p.Delete = &request.DeletePayload{VirtualCluster: c.GetVirtualCluster()}
	case *pb.Request_ChangeVirtualClusterVersion:
		c := pl.ChangeVirtualClusterVersion
		f := "request.change_virtual_cluster_version"
		id, err := teamVC(f+".virtual_cluster", c.GetVirtualCluster())
		if err != nil {
			return p, "", err
		}
		vcID = id
		if !checkVersionStrings(&v, f, c.GetChartVersion(), c.GetKubernetesVersion()) {
			return p, vcID, v.Err()
		}
		vc, err := liveVC(c.GetVirtualCluster(), "; only a provisioned virtual cluster can be upgraded")
		if err != nil {
			return p, vcID, err
		}
		p.ChangeVersion = s.requests.ResolveUpgrade(&v, f, vc, c.GetVirtualCluster(), c.GetChartVersion(), c.GetKubernetesVersion())
	case *pb.Request_SleepVirtualCluster, *pb.Request_WakeVirtualCluster:
		f, target, wake := "request.sleep_virtual_cluster.virtual_cluster", r.GetSleepVirtualCluster().GetVirtualCluster(), false
		if pl, ok := pl.(*pb.Request_WakeVirtualCluster); ok {
			f, target, wake = "request.wake_virtual_cluster.virtual_cluster", pl.WakeVirtualCluster.GetVirtualCluster(), true
		}
		id, err := teamVC(f, target)
		if err != nil {
			return p, "", err
		}
		vcID = id
		if _, err := liveVC(target, "; only a provisioned virtual cluster can sleep or wake"); err != nil {
			return p, vcID, err
		}
		p.Sleep = &request.SleepPayload{VirtualCluster: target, Wake: wake}
	default:
		v.Add("request.payload", "set one of create_virtual_cluster, change_virtual_cluster_quota, change_team_quota, delete_virtual_cluster, change_virtual_cluster_version, sleep_virtual_cluster, wake_virtual_cluster")
	}
	return p, vcID, v.Err()
}

// checkVersionStrings bounds the version strings a request names (field
// prefix f) before the catalog reads them; false when one is not plain.
func checkVersionStrings(v *errs.Violations, f, chart, kubernetes string) bool {
	plain := true
	for field, val := range map[string]string{".chart_version": chart, ".kubernetes_version": kubernetes} {
		if len(val) > 64 || strings.ContainsAny(val, " /\\\"'") {
			v.Add(f+field, "must be a plain version string")
			plain = false
		}
	}
	return plain
}

// CreateRequest implements pb.RequestServiceServer.
func (s *Requests) CreateRequest(ctx context.Context, req *pb.CreateRequestRequest) (*pb.Request, error) {
	r := req.GetRequest()
	if r == nil {
		return nil, errs.InvalidField("request", "required")
	}
	// The host clusters, which a new virtual cluster's placement is
	// checked against, come with the team and the caller's grants.
	var hosts []fleet.HostCluster
	team, a, err := s.readableTeamWith(ctx, "request.team", r.GetTeam(), func(b *store.Batch) {
		if r.GetCreateVirtualCluster() != nil {
			fleet.QueueAll(b, &hosts)
		}
	})
	if err != nil {
		return nil, err
	}
	if !a.CanRequest(team.ID, team.Department) {
		return nil, errs.PermissionDenied("only owners of %s (and department admins) create requests for it", r.GetTeam())
	}
	if hosts == nil && r.GetCreateVirtualCluster() != nil {
		hosts = []fleet.HostCluster{} // read: none is registered
	}
	p, _, err := s.payload(ctx, team, r, hosts)
	if err != nil {
		return nil, err
	}
	ahead := request.NewCreateAhead(team.Department)
	return createAhead(ctx, s.db, tenancy.DepartmentGroup(team.Department), request.Creates, ahead, a.Principal.Subject, "CreateRequest", req.GetRequestId(), req,
		func() *pb.Request { return &pb.Request{} },
		func(ctx context.Context, tx *store.Tx) (*pb.Request, error) {
			row, err := s.requests.CreateAhead(ctx, tx, a.Principal, req.GetRequestId(), team, r.GetJustification(), p, ahead)
			if err != nil {
				return nil, err
			}
			return requestToProto(row), nil
		})
}

// GetRequest implements pb.RequestServiceServer.
func (s *Requests) GetRequest(ctx context.Context, req *pb.GetRequestRequest) (*pb.Request, error) {
	_, r, err := s.accessAndRequest(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return requestToProto(r), nil
}

// accessAndRequest is access and readableRequest in one round trip.
func (s *Requests) accessAndRequest(ctx context.Context, name string) (*identity.Access, request.Request, error) {
	id, err := names.ParseRequest("name", name)
	if err != nil {
		return nil, request.Request{}, err
	}
	p, err := caller(ctx)
	if err != nil {
		return nil, request.Request{}, err
	}
	var b store.Batch
	var grants []tenancy.Grant
	var r request.Request
	tenancy.QueueGrantsOf(&b, &grants, p.Username, p.Groups)
	request.QueueGet(&b, &r, id, false)
	if err := s.db.SendShared(ctx, &b); err != nil {
		return nil, r, err
	}
	a := s.accessFrom(p, grants)
	if !a.CanReadTeam(r.Team, r.Department) {
		return nil, request.Request{}, errs.NotFound(name)
	}
	return a, r, nil
}

// ListRequests implements pb.RequestServiceServer.
func (s *Requests) ListRequests(ctx context.Context, req *pb.ListRequestsRequest) (*pb.ListRequestsResponse, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	list, next, err := page(req.GetPageToken(), "requests|"+req.GetFilter(), request.FirstPage, nil,
		func(before int64) ([]request.Request, bool, error) {
			return request.List(ctx, s.db, req.GetPageSize(), req.GetFilter(), before, readScope(a))
		},
		func(r request.Request) int64 { return r.Seq }, requestToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListRequestsResponse{Requests: list, NextPageToken: next}, nil
}

// decide authorizes a decision on the named request and runs apply on it
// (locked, etag checked) in one transaction; approving as for
// request.Service.Decide.
func (s *Requests) decide(ctx context.Context, name, etag string, approving bool, authorize func(*identity.Access, request.Request) error,
	apply func(ctx context.Context, tx *store.Tx, a *identity.Access, r *request.Request) error) (*pb.Request, error) {
	a, r, err := s.accessAndRequest(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := authorize(a, r); err != nil {
		return nil, err
	}
	out, err := s.requests.Decide(ctx, r, etag, approving, func(ctx context.Context, tx *store.Tx, r *request.Request) error {
		return apply(ctx, tx, a, r)
	})
	if err != nil {
		return nil, err
	}
	return requestToProto(out), nil
}

func mayDecide(verb string) func(*identity.Access, request.Request) error {
	return func(a *identity.Access, r request.Request) error {
		if !a.CanDecide(r.Department) {
			return errs.PermissionDenied("only platform admins and admins of %s %s its requests", names.Department(r.Department), verb)
		}
		return nil
	}
}

// ApproveRequest implements pb.RequestServiceServer.
func (s *Requests) ApproveRequest(ctx context.Context, req *pb.ApproveRequestRequest) (*pb.Request, error) {
	if len(req.GetReason()) > 4096 {
		return nil, errs.InvalidField("reason", "must be at most 4096 characters")
	}
	return s.decide(ctx, req.GetName(), req.GetEtag(), true, mayDecide("approve"),
		func(ctx context.Context, tx *store.Tx, a *identity.Access, r *request.Request) error {
			return s.requests.Approve(ctx, tx, r, a.Principal, a.PlatformAdmin, req.GetReason())
		})
}

// RejectRequest implements pb.RequestServiceServer.
func (s *Requests) RejectRequest(ctx context.Context, req *pb.RejectRequestRequest) (*pb.Request, error) {
	if len(req.GetReason()) > 4096 {
		return nil, errs.InvalidField("reason", "must be at most 4096 characters")
	}
	return s.decide(ctx, req.GetName(), req.GetEtag(), false, mayDecide("reject"),
		func(ctx context.Context, tx *store.Tx, a *identity.Access, r *request.Request) error {
			return s.requests.Reject(ctx, tx, r, a.Principal, a.PlatformAdmin, req.GetReason())
		})
}

// CancelRequest implements pb.RequestServiceServer.
func (s *Requests) CancelRequest(ctx context.Context, req *pb.CancelRequestRequest) (*pb.Request, error) {
	return s.decide(ctx, req.GetName(), req.GetEtag(), false,
		func(a *identity.Access, r request.Request) error {
			if r.Requester != a.Principal.Subject {
				return errs.PermissionDenied("only the requester can cancel %s", req.GetName())
			}
			return nil
		},
		func(ctx context.Context, tx *store.Tx, a *identity.Access, r *request.Request) error {
			return s.requests.Cancel(ctx, tx, r, a.Principal)
		})
}

// CheckFit answers "would it fit if approved now?" for a stored request or
// one not yet created.
func (s *Requests) CheckFit(ctx context.Context, req *pb.CheckFitRequest) (*pb.FitResult, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	var team tenancy.Team
	var p request.Payload
	vcID := ""
	switch {
	case req.GetName() != "":
		r, err := s.readableRequest(ctx, a, req.GetName())
		if err != nil {
			return nil, err
		}
		if team, err = tenancy.GetTeam(ctx, s.db, r.Team, false); err != nil {
			return nil, err
		}
		p, vcID = r.Payload, r.VirtualClusterID()
	case req.GetRequest() != nil:
		if team, _, err = s.readableTeam(ctx, "request.team", req.GetRequest().GetTeam()); err != nil {
			return nil, err
		}
		if !a.CanRequest(team.ID, team.Department) {
			return nil, errs.PermissionDenied("only owners of %s (and department admins) ask for it", names.Team(team.ID))
		}
		if p, vcID, err = s.payload(ctx, team, req.GetRequest(), nil); err != nil {
			return nil, err
		}
	default:
		return nil, errs.InvalidField("name", "set name (a stored request) or request (a new one)")
	}
	fit, err := s.requests.CheckFit(ctx, team, p, vcID)
	if err != nil {
		return nil, err
	}
	return fitToProto(fit), nil
}

func fitToProto(o request.Fit) *pb.FitResult {
	res := &pb.FitResult{Fits: o.Fits(), HostCluster: hostClusterName(o.HostCluster)}
	if e, ok := errs.As(o.NoHostCluster); ok {
		res.Shortfalls = append(res.Shortfalls, &pb.Shortfall{Level: string(fleet.LevelHostCluster), Message: e.PublicMessage()})
	}
	for _, s := range o.Shortfalls {
		res.Shortfalls = append(res.Shortfalls, &pb.Shortfall{
			Level: string(s.Level), Name: s.Name, Resource: string(s.Resource),
			Requested: s.Requested, Free: s.Free, Capacity: s.Capacity, Message: s.String(),
		})
	}
	for _, b := range o.Below {
		res.Shortfalls = append(res.Shortfalls, &pb.Shortfall{
			Level: "allocation", Resource: string(b.Resource), Requested: b.Requested, Message: b.String(),
		})
	}
	if e, ok := errs.As(o.Children); ok {
		for _, v := range e.Violations {
			res.Shortfalls = append(res.Shortfalls, &pb.Shortfall{Level: "children", Name: e.Metadata["name"], Message: v.Description})
		}
	}
	return res
}
