package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// Requests implements pb.RequestServiceServer.
type Requests struct {
	pb.UnimplementedRequestServiceServer
	*Service
}

const requestColumns = `id, seq, team_id, department_id, kind, virtual_cluster_id, payload, justification, state,
	requester, decider, decide_time, decision_reason, approval_policy_id, target_generation, failure_message,
	version, create_time, update_time`

// RequestRow is a stored request.
type RequestRow struct {
	ID, Team, Department, Kind string
	Seq                        int64
	VirtualCluster             *string
	Payload                    *pb.Request // only the payload oneof is set
	Justification, State       string
	Requester, Decider         string
	DecideTime                 *time.Time
	DecisionReason             string
	ApprovalPolicy             *string
	TargetGeneration           *int64
	FailureMessage             string
	Version                    int64
	Created, Updated           time.Time
}

func scanRequest(row pgx.Row) (RequestRow, error) {
	var r RequestRow
	var payload []byte
	err := row.Scan(&r.ID, &r.Seq, &r.Team, &r.Department, &r.Kind, &r.VirtualCluster, &payload, &r.Justification,
		&r.State, &r.Requester, &r.Decider, &r.DecideTime, &r.DecisionReason, &r.ApprovalPolicy, &r.TargetGeneration,
		&r.FailureMessage, &r.Version, &r.Created, &r.Updated)
	if err != nil {
		return r, err
	}
	r.Payload = &pb.Request{}
	err = protojson.Unmarshal(payload, r.Payload)
	return r, err
}

// Proto renders the API resource.
func (r RequestRow) Proto() *pb.Request {
	out := &pb.Request{
		Name:           names.Request(r.ID),
		Team:           names.Team(r.Team),
		Department:     names.Department(r.Department),
		Kind:           pb.Request_Kind(pb.Request_Kind_value[r.Kind]),
		Justification:  r.Justification,
		State:          pb.Request_State(pb.Request_State_value[r.State]),
		Requester:      r.Requester,
		Decider:        r.Decider,
		DecisionReason: r.DecisionReason,
		FailureMessage: r.FailureMessage,
		Etag:           tenancy.Etag(r.Version, r.Updated),
		CreateTime:     timestamppb.New(r.Created),
		UpdateTime:     timestamppb.New(r.Updated),
	}
	switch p := r.Payload.GetPayload().(type) {
	case *pb.Request_CreateVirtualCluster:
		out.Payload = p
	case *pb.Request_ChangeVirtualClusterQuota:
		out.Payload = p
	case *pb.Request_ChangeTeamQuota:
		out.Payload = p
	case *pb.Request_DeleteVirtualCluster:
		out.Payload = p
	case *pb.Request_ChangeVirtualClusterVersion:
		out.Payload = p
	}
	if r.DecideTime != nil {
		out.DecideTime = timestamppb.New(*r.DecideTime)
	}
	if r.ApprovalPolicy != nil {
		out.ApprovalPolicy = names.ApprovalPolicy(*r.ApprovalPolicy)
	}
	return out
}

func getRequest(ctx context.Context, q tenancy.Querier, id string, lock bool) (RequestRow, error) {
	sql := `SELECT ` + requestColumns + ` FROM requests WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	r, err := scanRequest(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errs.NotFound(names.Request(id))
	}
	return r, err
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "r" + hex.EncodeToString(b[:])
}

// readableRequest returns the request when the caller may read it:
// department admins, and anyone with a role on the request's team.
func (s *Requests) readableRequest(ctx context.Context, a *identity.Access, name string) (RequestRow, error) {
	id, err := names.ParseRequest("name", name)
	if err != nil {
		return RequestRow{}, err
	}
	r, err := getRequest(ctx, s.Tenancy.Pool, id, false)
	if err != nil {
		return r, err
	}
	if !a.CanReadTeam(r.Team, r.Department) {
		return RequestRow{}, errs.NotFound(name)
	}
	return r, nil
}

// maxVirtualClusterID leaves room for the "vc-" prefix of the host
// namespace and leaf queue within a 63-character DNS label.
const maxVirtualClusterID = 60

// desired is a validated request payload, ready to store and check.
type desired struct {
	kind   string
	vcID   string
	spec   *pb.VirtualClusterSpec // create
	quota  quota.Resources        // create, change vc quota, change team quota
	limit  *quota.Resources       // create, change vc quota
	accept bool                   // accept preemption
	// chart and kubernetes are the resolved versions of a version change.
	chart, kubernetes string
	stored            *pb.Request // payload as stored
}

// RunaiGPUGroupLabel is the label KAI's binder puts on host pods sharing a
// GPU (docs/vcluster-verification.md).
const RunaiGPUGroupLabel = "runai-gpu-group"

// addVersionProblems turns vCluster version problems into violations of
// <prefix>.chart_version / .kubernetes_version.
func addVersionProblems(v *errs.Violations, prefix string, problems []vclusterversions.Problem) {
	for _, p := range problems {
		field := ".chart_version"
		if p.Field == "kubernetes" {
			field = ".kubernetes_version"
		}
		v.Add(prefix+field, "%s", p.Message)
	}
}

func (s *Service) validatePayload(ctx context.Context, q tenancy.Querier, team tenancy.TeamRow, r *pb.Request) (desired, error) {
	var v errs.Violations
	d := desired{stored: &pb.Request{}}
	dedicated := team.Tier == pb.IsolationTier_DEDICATED.String()
	checkGPU := func(field string, g quota.GPU) {
		if dedicated && !g.IsWhole() {
			v.Add(field, "%s is a DEDICATED team: whole GPUs only (got %s), since KAI does not isolate GPU memory", names.Team(team.ID), g)
		}
	}
	checkLimit := func(field string, lim *pb.Quota, q quota.Resources) *quota.Resources {
		if lim == nil {
			return nil
		}
		l := tenancy.QuotaFromProto(&v, field, lim)
		for k, want := range q.All() {
			if have := l.Get(k); have < want {
				v.Add(field+"."+k.Field(), "limit %s is below the quota %s", k.Format(have), k.Format(want))
			}
		}
		checkGPU(field+".gpu", l.GPU)
		return &l
	}
	if len(r.GetJustification()) > 4096 {
		v.Add("request.justification", "must be at most 4096 characters")
	}
	switch p := r.GetPayload().(type) {
	case *pb.Request_CreateVirtualCluster:
		d.kind = pb.Request_CREATE_VIRTUAL_CLUSTER.String()
		c := p.CreateVirtualCluster
		d.vcID = c.GetVirtualClusterId()
		names.ValidateID(&v, "request.create_virtual_cluster.virtual_cluster_id", d.vcID)
		if len(d.vcID) > maxVirtualClusterID {
			v.Add("request.create_virtual_cluster.virtual_cluster_id",
				"must be at most %d characters: the host namespace and KAI leaf queue are named vc-<id>", maxVirtualClusterID)
		}
		spec := c.GetSpec()
		if spec == nil {
			v.Add("request.create_virtual_cluster.spec", "required")
			return d, v.Err()
		}
		f := "request.create_virtual_cluster.spec"
		if len(spec.GetDisplayName()) > 256 {
			v.Add(f+".display_name", "must be at most 256 characters")
		}
		d.quota = tenancy.QuotaFromProto(&v, f+".quota", spec.GetQuota())
		if spec.GetQuota() == nil || d.quota.IsZero() {
			v.Add(f+".quota", "required: a virtual cluster needs some guaranteed GPU, CPU or memory")
		}
		checkGPU(f+".quota.gpu", d.quota.GPU)
		d.limit = checkLimit(f+".limit", spec.GetLimit(), d.quota)
		if w := spec.GetOverQuotaWeight(); w < 0 || w > 1000 {
			v.Add(f+".over_quota_weight", "must be between 0 and 1000 (0 means the default, 1)")
		}
		if pr := spec.GetPriority(); pr < 0 || pr > 1000 {
			v.Add(f+".priority", "must be between 0 and 1000 (0 means the default, 100)")
		}
		if spec.GetAllowFractionalGpus() && dedicated {
			v.Add(f+".allow_fractional_gpus", "not allowed in the DEDICATED tier: KAI does not isolate GPU memory between pods sharing a GPU")
		}
		if !d.quota.GPU.IsWhole() && !spec.GetAllowFractionalGpus() {
			v.Add(f+".quota.gpu", "a fractional GPU quota (%s) needs allow_fractional_gpus", d.quota.GPU)
		}
		for field, val := range map[string]string{".kubernetes_version": spec.GetKubernetesVersion(), ".chart_version": spec.GetChartVersion()} {
			if len(val) > 64 || strings.ContainsAny(val, " /\\\"'") {
				v.Add(f+field, "must be a plain version string")
			}
		}
		versions, problems := s.Versions.Resolve(spec.GetChartVersion(), spec.GetKubernetesVersion())
		addVersionProblems(&v, f, problems)
		if spec.GetAllowFractionalGpus() && len(problems) == 0 && !versions.Release.HostLabelsSurvive {
			v.Add(f+".allow_fractional_gpus", "not available with vCluster chart %s: its syncer rebuilds the labels of host pods on every update "+
				"and drops %s, the GPU-sharing group KAI's binder sets on the host pod, so pods sharing a GPU would lose track of it; "+
				"use chart %s", versions.Release.Chart, RunaiGPUGroupLabel, s.Versions.DefaultChart())
		}
		if et := spec.GetExpireTime(); et != nil {
			if err := et.CheckValid(); err != nil {
				v.Add(f+".expire_time", "%v", err)
			} else if !et.AsTime().After(s.now()) {
				v.Add(f+".expire_time", "must be in the future")
			}
		}
		norm := &pb.VirtualClusterSpec{
			DisplayName:         spec.GetDisplayName(),
			Quota:               tenancy.QuotaToProto(d.quota),
			OverQuotaWeight:     spec.GetOverQuotaWeight(),
			Priority:            spec.GetPriority(),
			AllowFractionalGpus: spec.GetAllowFractionalGpus(),
			KubernetesVersion:   spec.GetKubernetesVersion(),
			ChartVersion:        spec.GetChartVersion(),
			ExpireTime:          spec.GetExpireTime(),
		}
		if norm.OverQuotaWeight == 0 {
			norm.OverQuotaWeight = 1
		}
		if norm.Priority == 0 {
			norm.Priority = 100
		}
		norm.ChartVersion, norm.KubernetesVersion = versions.Release.Chart, versions.Kubernetes
		if d.limit != nil {
			norm.Limit = tenancy.QuotaToProto(*d.limit)
		}
		d.spec = norm
		d.stored.Payload = &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
			VirtualClusterId: d.vcID, Spec: norm, VirtualCluster: names.VirtualCluster(team.ID, d.vcID),
		}}
	case *pb.Request_ChangeVirtualClusterQuota:
		d.kind = pb.Request_CHANGE_VIRTUAL_CLUSTER_QUOTA.String()
		c := p.ChangeVirtualClusterQuota
		f := "request.change_virtual_cluster_quota"
		vcID, err := teamVirtualCluster(&v, team, f+".virtual_cluster", c.GetVirtualCluster())
		if err != nil {
			return d, err
		}
		d.vcID = vcID
		d.quota = tenancy.QuotaFromProto(&v, f+".quota", c.GetQuota())
		if c.GetQuota() == nil || d.quota.IsZero() {
			v.Add(f+".quota", "required: the new guaranteed quota (all three resources; to give everything back, delete the virtual cluster)")
		}
		checkGPU(f+".quota.gpu", d.quota.GPU)
		d.limit = checkLimit(f+".limit", c.GetLimit(), d.quota)
		d.accept = c.GetAcceptPreemption()
		if err := v.Err(); err != nil {
			return d, err
		}
		vc, err := liveVirtualCluster(ctx, q, team, c.GetVirtualCluster(), vcID, "only a provisioned virtual cluster can be resized")
		if err != nil {
			return d, err
		}
		if !d.quota.GPU.IsWhole() && !vc.AllowFractionalGPUs {
			v.Add(f+".quota.gpu", "a fractional GPU quota (%s) needs a virtual cluster created with allow_fractional_gpus", d.quota.GPU)
		}
		st := &pb.ChangeVirtualClusterQuotaPayload{VirtualCluster: c.GetVirtualCluster(), Quota: tenancy.QuotaToProto(d.quota), AcceptPreemption: d.accept}
		if d.limit != nil {
			st.Limit = tenancy.QuotaToProto(*d.limit)
		}
		d.stored.Payload = &pb.Request_ChangeVirtualClusterQuota{ChangeVirtualClusterQuota: st}
	case *pb.Request_ChangeTeamQuota:
		d.kind = pb.Request_CHANGE_TEAM_QUOTA.String()
		c := p.ChangeTeamQuota
		f := "request.change_team_quota"
		if c.GetQuota() == nil {
			v.Add(f+".quota", "required")
		}
		d.quota = tenancy.QuotaFromProto(&v, f+".quota", c.GetQuota())
		checkGPU(f+".quota.gpu", d.quota.GPU)
		d.accept = c.GetAcceptPreemption()
		d.stored.Payload = &pb.Request_ChangeTeamQuota{ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{
			Quota: tenancy.QuotaToProto(d.quota), AcceptPreemption: d.accept}}
	case *pb.Request_DeleteVirtualCluster:
		d.kind = pb.Request_DELETE_VIRTUAL_CLUSTER.String()
		c := p.DeleteVirtualCluster
		f := "request.delete_virtual_cluster.virtual_cluster"
		vcID, err := teamVirtualCluster(&v, team, f, c.GetVirtualCluster())
		if err != nil {
			return d, err
		}
		d.vcID = vcID
		if _, err := liveVirtualCluster(ctx, q, team, c.GetVirtualCluster(), vcID, "it cannot be deleted now"); err != nil {
			return d, err
		}
		d.stored.Payload = &pb.Request_DeleteVirtualCluster{DeleteVirtualCluster: &pb.DeleteVirtualClusterPayload{VirtualCluster: c.GetVirtualCluster()}}
	case *pb.Request_ChangeVirtualClusterVersion:
		d.kind = pb.Request_CHANGE_VIRTUAL_CLUSTER_VERSION.String()
		c := p.ChangeVirtualClusterVersion
		f := "request.change_virtual_cluster_version"
		vcID, err := teamVirtualCluster(&v, team, f+".virtual_cluster", c.GetVirtualCluster())
		if err != nil {
			return d, err
		}
		d.vcID = vcID
		vc, err := liveVirtualCluster(ctx, q, team, c.GetVirtualCluster(), vcID, "only a provisioned virtual cluster can be upgraded")
		if err != nil {
			return d, err
		}
		to, problems := s.Versions.Upgrade(vc.ChartVersion, vc.KubernetesVersion, c.GetChartVersion(), c.GetKubernetesVersion())
		addVersionProblems(&v, f, problems)
		if len(problems) == 0 && to.Release.Chart == vclusterversions.Normalize(vc.ChartVersion) && to.Kubernetes == vc.KubernetesVersion {
			v.Add(f+".chart_version", "%s already runs vCluster chart %s with Kubernetes %s; name a newer chart_version or kubernetes_version",
				c.GetVirtualCluster(), to.Release.Chart, to.Kubernetes)
		}
		d.chart, d.kubernetes = to.Release.Chart, to.Kubernetes
		d.stored.Payload = &pb.Request_ChangeVirtualClusterVersion{ChangeVirtualClusterVersion: &pb.ChangeVirtualClusterVersionPayload{
			VirtualCluster: c.GetVirtualCluster(), ChartVersion: d.chart, KubernetesVersion: d.kubernetes}}
	default:
		v.Add("request.payload", "set one of create_virtual_cluster, change_virtual_cluster_quota, change_team_quota, delete_virtual_cluster, change_virtual_cluster_version")
	}
	return d, v.Err()
}

// teamVirtualCluster parses the virtual cluster a request names (field),
// which must belong to the requesting team.
func teamVirtualCluster(v *errs.Violations, team tenancy.TeamRow, field, name string) (string, error) {
	vcTeam, vcID, err := names.ParseVirtualCluster(field, name)
	if err != nil {
		return "", err
	}
	if vcTeam != team.ID {
		v.Add(field, "must belong to %s", names.Team(team.ID))
		return "", v.Err()
	}
	return vcID, nil
}

// liveVirtualCluster loads the team's virtual cluster a request acts on:
// NOT_FOUND unless it is the team's, FAILED_PRECONDITION (saying why) unless
// it is provisioned.
func liveVirtualCluster(ctx context.Context, q tenancy.Querier, team tenancy.TeamRow, name, vcID, why string) (VirtualClusterRow, error) {
	vc, err := GetVirtualClusterRow(ctx, q, vcID, false)
	if err != nil || vc.Team != team.ID {
		return vc, errs.NotFound(name)
	}
	if !isLive(vc.Phase) {
		return vc, errs.FailedPrecondition(errs.ReasonInvalidTransition, "%s is %s; %s", name, vc.Phase, why)
	}
	return vc, nil
}

// desiredFromRow rebuilds the validated payload of a stored request.
func desiredFromRow(r RequestRow) desired {
	d := desired{kind: r.Kind, stored: r.Payload}
	if r.VirtualCluster != nil {
		d.vcID = *r.VirtualCluster
	}
	var v errs.Violations // stored payloads were validated on create
	switch p := r.Payload.GetPayload().(type) {
	case *pb.Request_CreateVirtualCluster:
		d.spec = p.CreateVirtualCluster.GetSpec()
		d.quota = tenancy.QuotaFromProto(&v, "", d.spec.GetQuota())
		if d.spec.GetLimit() != nil {
			l := tenancy.QuotaFromProto(&v, "", d.spec.GetLimit())
			d.limit = &l
		}
	case *pb.Request_ChangeVirtualClusterQuota:
		d.quota = tenancy.QuotaFromProto(&v, "", p.ChangeVirtualClusterQuota.GetQuota())
		if p.ChangeVirtualClusterQuota.GetLimit() != nil {
			l := tenancy.QuotaFromProto(&v, "", p.ChangeVirtualClusterQuota.GetLimit())
			d.limit = &l
		}
		d.accept = p.ChangeVirtualClusterQuota.GetAcceptPreemption()
	case *pb.Request_ChangeTeamQuota:
		d.quota = tenancy.QuotaFromProto(&v, "", p.ChangeTeamQuota.GetQuota())
		d.accept = p.ChangeTeamQuota.GetAcceptPreemption()
	case *pb.Request_ChangeVirtualClusterVersion:
		d.chart, d.kubernetes = p.ChangeVirtualClusterVersion.GetChartVersion(), p.ChangeVirtualClusterVersion.GetKubernetesVersion()
	}
	return d
}

func (s *Requests) CreateRequest(ctx context.Context, req *pb.CreateRequestRequest) (*pb.Request, error) {
	r := req.GetRequest()
	if r == nil {
		return nil, errs.InvalidField("request", "required")
	}
	team, a, err := s.Tenancy.ReadableTeam(ctx, "request.team", r.GetTeam())
	if err != nil {
		return nil, err
	}
	if !a.CanRequest(team.ID, team.Department) {
		return nil, errs.PermissionDenied("only owners of %s (and department admins) create requests for it", r.GetTeam())
	}
	d, err := s.validatePayload(ctx, s.Tenancy.Pool, team, r)
	if err != nil {
		return nil, err
	}
	var out *pb.Request
	err = store.InTx(ctx, s.Tenancy.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		out, err = tenancy.Idempotent(ctx, tx, a.Principal.Subject, "CreateRequest", req.GetRequestId(), req,
			func() *pb.Request { return &pb.Request{} },
			func() (*pb.Request, error) { return s.create(ctx, tx, a, team, r, d, req.GetRequestId()) })
		return err
	})
	return out, err
}

func (s *Requests) create(ctx context.Context, tx pgx.Tx, a *identity.Access, team tenancy.TeamRow, r *pb.Request, d desired, requestID string) (*pb.Request, error) {
	// Locking the department first keeps one lock order (department ->
	// request -> virtual cluster) everywhere, so approvals never deadlock.
	if _, err := tenancy.LockDepartment(ctx, tx, team.Department); err != nil {
		return nil, err
	}
	if d.kind == pb.Request_CREATE_VIRTUAL_CLUSTER.String() {
		if err := s.insertPendingVirtualCluster(ctx, tx, team.ID, d); err != nil {
			return nil, err
		}
	}
	payload, err := protojson.Marshal(d.stored)
	if err != nil {
		return nil, err
	}
	var vcID *string
	if d.vcID != "" {
		vcID = &d.vcID
	}
	row, err := scanRequest(tx.QueryRow(ctx, `
		INSERT INTO requests (id, team_id, department_id, kind, virtual_cluster_id, payload, justification, state, requester)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', $8) RETURNING `+requestColumns,
		newRequestID(), team.ID, team.Department, d.kind, vcID, payload, r.GetJustification(), a.Principal.Subject))
	if err != nil {
		if store.SQLState(err) == "23505" {
			what := names.Team(team.ID) + "'s quota"
			if d.vcID != "" {
				what = names.VirtualCluster(team.ID, d.vcID)
			}
			return nil, errs.New(errs.KindAlreadyExists, errs.ReasonAlreadyExists,
				"%s already has a pending request; cancel it or wait for a decision", what)
		}
		return nil, err
	}
	if err := audit.Record(ctx, tx, audit.Event{
		Actor: a.Principal, Action: "CreateRequest", Resource: names.Request(row.ID), RequestID: requestID,
		CorrelationID: s.Tenancy.CorrelationID(ctx), Department: team.Department, Team: team.ID, After: row.Proto(),
	}); err != nil {
		return nil, err
	}
	if err := s.autoApprove(ctx, tx, &row, team); err != nil {
		return nil, err
	}
	return row.Proto(), nil
}

func (s *Requests) insertPendingVirtualCluster(ctx context.Context, tx pgx.Tx, team string, d desired) error {
	// A name whose earlier virtual cluster was rejected or deleted may be
	// used again; the old row is history (the audit log keeps it).
	if _, err := tx.Exec(ctx, `DELETE FROM virtual_clusters WHERE id = $1 AND phase IN ('REJECTED', 'DELETED')`, d.vcID); err != nil {
		return err
	}
	spec := d.spec
	var lg, lc, lm *int64
	if d.limit != nil {
		g, c, m := int64(d.limit.GPU), d.limit.CPUMillis, d.limit.MemoryBytes
		lg, lc, lm = &g, &c, &m
	}
	var expire *time.Time
	if spec.GetExpireTime() != nil {
		t := spec.GetExpireTime().AsTime()
		expire = &t
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO virtual_clusters (id, team_id, display_name, gpu_centi, cpu_millis, memory_bytes,
		       limit_gpu_centi, limit_cpu_millis, limit_memory_bytes, over_quota_weight, priority,
		       allow_fractional_gpus, kubernetes_version, chart_version, expire_time, phase)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'PENDING_APPROVAL')`,
		d.vcID, team, spec.GetDisplayName(), d.quota.GPU, d.quota.CPUMillis, d.quota.MemoryBytes, lg, lc, lm,
		spec.GetOverQuotaWeight(), spec.GetPriority(), spec.GetAllowFractionalGpus(), spec.GetKubernetesVersion(),
		spec.GetChartVersion(), expire)
	if store.SQLState(err) == "23505" {
		return errs.New(errs.KindAlreadyExists, errs.ReasonAlreadyExists,
			"virtual cluster name %q is taken (names are unique across all teams: they name KAI queues)", d.vcID).With("virtual_cluster_id", d.vcID)
	}
	return err
}

func (s *Requests) GetRequest(ctx context.Context, req *pb.GetRequestRequest) (*pb.Request, error) {
	a, err := s.Tenancy.Access(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.readableRequest(ctx, a, req.GetName())
	if err != nil {
		return nil, err
	}
	return r.Proto(), nil
}

var requestFilter = filter.Schema{
	"state":      {Column: "state", Type: filter.Enum, Enum: []string{StatePending, StateApproved, StateRejected, StateCancelled, StateApplied, StateFailed}},
	"kind":       {Column: "kind", Type: filter.Enum, Enum: []string{"CREATE_VIRTUAL_CLUSTER", "CHANGE_VIRTUAL_CLUSTER_QUOTA", "CHANGE_TEAM_QUOTA", "DELETE_VIRTUAL_CLUSTER", "CHANGE_VIRTUAL_CLUSTER_VERSION"}},
	"team":       {Column: "team_id", Type: filter.String, Strip: "teams/"},
	"department": {Column: "department_id", Type: filter.String, Strip: "departments/"},
	"requester":  {Column: "requester", Type: filter.String},
}

func (s *Requests) ListRequests(ctx context.Context, req *pb.ListRequestsRequest) (*pb.ListRequestsResponse, error) {
	a, err := s.Tenancy.Access(ctx)
	if err != nil {
		return nil, err
	}
	q, err := store.NewList(req.GetPageSize(), req.GetFilter(), requestFilter)
	if err != nil {
		return nil, err
	}
	scope := "requests|" + req.GetFilter()
	var before int64 = 1<<63 - 1
	if err := store.DecodePageToken(req.GetPageToken(), scope, &before); err != nil {
		return nil, err
	}
	q.Where("seq < " + q.Arg(before))
	if !a.PlatformAdmin {
		q.Where("team_id = ANY(" + q.Arg(a.ReadableTeams()) + ") OR department_id = ANY(" + q.Arg(a.AdminDepartments()) + ")")
	}
	list, more, err := store.FetchPage(ctx, s.Tenancy.Pool, q, `SELECT `+requestColumns+` FROM requests`, "seq DESC", scanRequest)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListRequestsResponse{}
	if more {
		resp.NextPageToken = store.EncodePageToken(scope, list[len(list)-1].Seq)
	}
	for _, r := range list {
		resp.Requests = append(resp.Requests, r.Proto())
	}
	return resp, nil
}

// decide runs one decision on a request in a transaction: it locks the
// department, then the request, re-checks state and etag, and calls apply.
func (s *Requests) decide(ctx context.Context, name, etag string, authorize func(*identity.Access, RequestRow) error,
	apply func(ctx context.Context, tx pgx.Tx, a *identity.Access, r *RequestRow) error) (*pb.Request, error) {
	a, err := s.Tenancy.Access(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.readableRequest(ctx, a, name)
	if err != nil {
		return nil, err
	}
	if err := authorize(a, r); err != nil {
		return nil, err
	}
	var out *pb.Request
	err = store.InTx(ctx, s.Tenancy.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tenancy.LockDepartment(ctx, tx, r.Department); err != nil {
			return err
		}
		cur, err := getRequest(ctx, tx, r.ID, true)
		if err != nil {
			return err
		}
		if err := tenancy.CheckEtag(name, etag, tenancy.Etag(cur.Version, cur.Updated)); err != nil {
			return err
		}
		if err := apply(ctx, tx, a, &cur); err != nil {
			return err
		}
		out = cur.Proto()
		return nil
	})
	return out, err
}

func (s *Requests) ApproveRequest(ctx context.Context, req *pb.ApproveRequestRequest) (*pb.Request, error) {
	if len(req.GetReason()) > 4096 {
		return nil, errs.InvalidField("reason", "must be at most 4096 characters")
	}
	return s.decide(ctx, req.GetName(), req.GetEtag(),
		func(a *identity.Access, r RequestRow) error {
			if !a.CanDecide(r.Department) {
				return errs.PermissionDenied("only platform admins and admins of %s approve its requests", names.Department(r.Department))
			}
			return nil
		},
		func(ctx context.Context, tx pgx.Tx, a *identity.Access, r *RequestRow) error {
			return s.approve(ctx, tx, r, a.Principal, a.Principal.Subject, req.GetReason(), "")
		})
}

func (s *Requests) RejectRequest(ctx context.Context, req *pb.RejectRequestRequest) (*pb.Request, error) {
	if len(req.GetReason()) > 4096 {
		return nil, errs.InvalidField("reason", "must be at most 4096 characters")
	}
	return s.decide(ctx, req.GetName(), req.GetEtag(),
		func(a *identity.Access, r RequestRow) error {
			if !a.CanDecide(r.Department) {
				return errs.PermissionDenied("only platform admins and admins of %s reject its requests", names.Department(r.Department))
			}
			return nil
		},
		func(ctx context.Context, tx pgx.Tx, a *identity.Access, r *RequestRow) error {
			return s.close(ctx, tx, r, a.Principal, StateRejected, req.GetReason(), "RejectRequest")
		})
}

func (s *Requests) CancelRequest(ctx context.Context, req *pb.CancelRequestRequest) (*pb.Request, error) {
	return s.decide(ctx, req.GetName(), req.GetEtag(),
		func(a *identity.Access, r RequestRow) error {
			if r.Requester != a.Principal.Subject {
				return errs.PermissionDenied("only the requester can cancel %s", req.GetName())
			}
			return nil
		},
		func(ctx context.Context, tx pgx.Tx, a *identity.Access, r *RequestRow) error {
			return s.close(ctx, tx, r, a.Principal, StateCancelled, "cancelled by the requester", "CancelRequest")
		})
}

// close rejects or cancels a pending request; a virtual cluster waiting for
// it is marked REJECTED.
func (s *Requests) close(ctx context.Context, tx pgx.Tx, r *RequestRow, actor identity.Principal, state, reason, action string) error {
	if !CanTransition(r.State, state) {
		return transitionError(names.Request(r.ID), r.State, state)
	}
	before := r.Proto()
	row, err := scanRequest(tx.QueryRow(ctx, `
		UPDATE requests SET state = $2, decider = $3, decide_time = now(), decision_reason = $4,
		       version = version + 1, update_time = now()
		 WHERE id = $1 RETURNING `+requestColumns, r.ID, state, actor.Subject, reason))
	if err != nil {
		return err
	}
	*r = row
	if r.Kind == pb.Request_CREATE_VIRTUAL_CLUSTER.String() && r.VirtualCluster != nil {
		if _, err := tx.Exec(ctx, `UPDATE virtual_clusters SET phase = 'REJECTED', status_message = $2,
			version = version + 1, update_time = now() WHERE id = $1 AND phase = 'PENDING_APPROVAL'`,
			*r.VirtualCluster, "request "+strings.ToLower(state)+": "+reason); err != nil {
			return err
		}
	}
	return audit.Record(ctx, tx, audit.Event{
		Actor: actor, Action: action, Resource: names.Request(r.ID), CorrelationID: s.Tenancy.CorrelationID(ctx),
		Department: r.Department, Team: r.Team, Before: before, After: r.Proto(),
	})
}
