package api

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// Proto <-> domain conversion: the only place the domain types meet the
// generated ones.

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func tsPtr(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// quotaFromProto validates and converts an API quota; nil means zero.
func quotaFromProto(v *errs.Violations, field string, q *pb.Quota) quota.Resources {
	var r quota.Resources
	if q == nil {
		return r
	}
	if q.Gpu != "" {
		g, err := quota.ParseGPU(q.Gpu)
		if err != nil {
			v.Add(field+".gpu", "%v", err)
		}
		r.GPU = g
	}
	r.CPUMillis = quantity(v, field, "cpu", q.Cpu, "cpu_millis", q.CpuMillis, quota.ParseCPU, quota.FormatCPU)
	r.MemoryBytes = quantity(v, field, "memory", q.Memory, "memory_bytes", q.MemoryBytes, quota.ParseMemory, quota.FormatMemory)
	*v = append(*v, r.Validate(field)...)
	return r
}

// quantity is one resource of a quota given either as a Kubernetes
// quantity string (cpu "16", memory "64Gi") or as the canonical integer
// (cpu_millis, memory_bytes). Both may be set only when they agree, so a
// client that sends cpu "16" next to a stale cpu_millis is told, not
// guessed at.
func quantity(v *errs.Violations, field, qField string, q *string, nField string, n int64,
	parse func(string) (int64, error), format func(int64) string) int64 {
	if q == nil {
		return n
	}
	parsed, err := parse(*q)
	if err != nil {
		v.Add(field+"."+qField, "%v", err)
		return n
	}
	if n != 0 && n != parsed {
		v.Add(field+"."+qField, "%s is %s, but %s says %s; set one of them", qField, format(parsed), nField, format(n))
	}
	return parsed
}

func quotaToProto(r quota.Resources) *pb.Quota {
	return &pb.Quota{Gpu: r.GPU.String(), CpuMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes}
}

func quotaPtrToProto(r *quota.Resources) *pb.Quota {
	if r == nil {
		return nil
	}
	return quotaToProto(*r)
}

func departmentToProto(d tenancy.Department) *pb.Department {
	return &pb.Department{
		Name: d.Name(), DisplayName: d.DisplayName, QuotaBudget: quotaToProto(d.Budget), AdminGroups: d.AdminGroups,
		SleepingKeepsQuota: &d.SleepingKeepsQuota, Etag: d.Etag(), CreateTime: ts(d.Created), UpdateTime: ts(d.Updated),
		Uid: d.UID, RequesterCannotDecide: proto.Bool(d.RequesterCannotDecide),
	}
}

func teamToProto(t tenancy.Team) *pb.Team {
	return &pb.Team{
		Name: t.Name(), Department: names.Department(t.Department), DisplayName: t.DisplayName,
		IsolationTier: pb.IsolationTier(pb.IsolationTier_value[string(t.Tier)]), Quota: quotaToProto(t.Quota),
		NodePool: t.Pool, Uid: t.UID, Etag: t.Etag(), CreateTime: ts(t.Created), UpdateTime: ts(t.Updated),
		AutoSleepAfter: autoSleepToProto(t.AutoSleepAfter),
	}
}

func autoSleepToProto(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}

// autoSleepFromProto validates a team's auto_sleep_after.
func autoSleepFromProto(v *errs.Violations, field string, d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	if err := d.CheckValid(); err != nil {
		v.Add(field, "invalid duration: %v", err)
		return 0
	}
	out := d.AsDuration()
	tenancy.CheckAutoSleepAfter(v, field, out)
	return out
}

func memberToProto(m tenancy.Member) *pb.Member {
	out := &pb.Member{
		Name: m.Name(), Role: pb.TeamRole(pb.TeamRole_value[string(m.Role)]),
		Etag: m.Etag(), CreateTime: ts(m.Created), UpdateTime: ts(m.Updated),
	}
	if m.Kind == tenancy.KindGroup {
		out.Principal = &pb.Member_Group{Group: m.Principal}
	} else {
		out.Principal = &pb.Member_User{User: m.Principal}
	}
	return out
}

func policyToProto(p request.Policy) *pb.ApprovalPolicy {
	return &pb.ApprovalPolicy{
		Name: p.Name(), DisplayName: p.DisplayName, Expression: p.Expression, Disabled: p.Disabled,
		Etag: p.Etag(), CreateTime: ts(p.Created), UpdateTime: ts(p.Updated),
	}
}

func specToProto(s virtualcluster.Spec) *pb.VirtualClusterSpec {
	return &pb.VirtualClusterSpec{
		DisplayName: s.DisplayName, Quota: quotaToProto(s.Quota), Limit: quotaPtrToProto(s.Limit),
		OverQuotaWeight: s.OverQuotaWeight, Priority: s.Priority, AllowFractionalGpus: s.AllowFractionalGPUs,
		KubernetesVersion: s.KubernetesVersion, ChartVersion: s.ChartVersion, ExpireTime: tsPtr(s.ExpireTime),
		Placement: placementToProto(s.Placement), Sleep: s.Sleep,
	}
}

func placementToProto(p virtualcluster.Placement) *pb.Placement {
	if p.IsZero() {
		return nil
	}
	out := &pb.Placement{HostClusterLabels: p.Labels}
	if p.HostCluster != "" {
		out.HostCluster = names.HostCluster(p.HostCluster)
	}
	return out
}

// placementFromProto validates a request's placement (field is its path).
func placementFromProto(v *errs.Violations, field string, p *pb.Placement) virtualcluster.Placement {
	var out virtualcluster.Placement
	if p == nil {
		return out
	}
	if p.GetHostCluster() != "" {
		id, err := names.ParseHostCluster(field+".host_cluster", p.GetHostCluster())
		if e, ok := errs.As(err); ok {
			*v = append(*v, e.Violations...)
		}
		out.HostCluster = id
	}
	virtualcluster.ValidateLabels(v, field+".host_cluster_labels", p.GetHostClusterLabels())
	if len(p.GetHostClusterLabels()) > 0 {
		out.Labels = p.GetHostClusterLabels()
	}
	return out
}

func hostClusterName(id string) string {
	if id == "" {
		return ""
	}
	return names.HostCluster(id)
}

func conditionsToProto(cs []virtualcluster.Condition) []*pb.Condition {
	out := make([]*pb.Condition, 0, len(cs))
	for _, c := range cs {
		pc := &pb.Condition{Type: c.Type, Status: pb.Condition_Status(pb.Condition_Status_value[string(c.Status)]),
			Reason: c.Reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration}
		if !c.LastTransitionTime.IsZero() {
			pc.LastTransitionTime = ts(c.LastTransitionTime)
		}
		out = append(out, pc)
	}
	return out
}

func virtualClusterToProto(v virtualcluster.VirtualCluster) *pb.VirtualCluster {
	return &pb.VirtualCluster{
		Name: v.Name(),
		Spec: specToProto(v.Spec),
		Status: &pb.VirtualClusterStatus{
			Phase:              pb.VirtualClusterStatus_Phase(pb.VirtualClusterStatus_Phase_value[string(v.Phase)]),
			Conditions:         conditionsToProto(v.Conditions),
			ObservedGeneration: v.ObservedGeneration,
			Endpoint:           v.Endpoint,
			Message:            v.StatusMessage,
			Allocated:          quotaToProto(v.Allocated),
			HostCluster:        hostClusterName(v.HostCluster),
		},
		Generation: v.Generation,
		Uid:        v.UID,
		Etag:       v.Etag(),
		CreateTime: ts(v.Created),
		UpdateTime: ts(v.Updated),
	}
}

func requestToProto(r request.Request) *pb.Request {
	out := &pb.Request{
		Name: r.Name(), Team: names.Team(r.Team), Department: names.Department(r.Department),
		Kind: pb.Request_Kind(pb.Request_Kind_value[string(r.Kind)]), Justification: r.Justification,
		State: pb.Request_State(pb.Request_State_value[string(r.State)]), Requester: r.Requester, Decider: r.Decider,
		DecisionReason: r.DecisionReason, FailureMessage: r.FailureMessage, Etag: r.Etag(),
		CreateTime: ts(r.Created), UpdateTime: ts(r.Updated), DecideTime: tsPtr(r.DecideTime),
	}
	payloadToProto(r.Payload, out)
	if r.ApprovalPolicy != nil {
		out.ApprovalPolicy = names.ApprovalPolicy(*r.ApprovalPolicy)
	}
	return out
}

func payloadToProto(p request.Payload, out *pb.Request) {
	switch {
	case p.Create != nil:
		out.Payload = &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
			VirtualClusterId: p.Create.VirtualClusterID, Spec: specToProto(p.Create.Spec), VirtualCluster: p.Create.VirtualCluster}}
	case p.ChangeVCQuota != nil:
		c := p.ChangeVCQuota
		out.Payload = &pb.Request_ChangeVirtualClusterQuota{ChangeVirtualClusterQuota: &pb.ChangeVirtualClusterQuotaPayload{
			VirtualCluster: c.VirtualCluster, Quota: quotaToProto(c.Quota), Limit: quotaPtrToProto(c.Limit), AcceptPreemption: c.AcceptPreemption}}
	case p.ChangeTeamQuota != nil:
		out.Payload = &pb.Request_ChangeTeamQuota{ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{
			Quota: quotaToProto(p.ChangeTeamQuota.Quota), AcceptPreemption: p.ChangeTeamQuota.AcceptPreemption}}
	case p.Delete != nil:
		out.Payload = &pb.Request_DeleteVirtualCluster{DeleteVirtualCluster: &pb.DeleteVirtualClusterPayload{VirtualCluster: p.Delete.VirtualCluster}}
	case p.ChangeVersion != nil:
		c := p.ChangeVersion
		out.Payload = &pb.Request_ChangeVirtualClusterVersion{ChangeVirtualClusterVersion: &pb.ChangeVirtualClusterVersionPayload{
			VirtualCluster: c.VirtualCluster, ChartVersion: c.ChartVersion, KubernetesVersion: c.KubernetesVersion}}
	case p.Sleep != nil && p.Sleep.Wake:
		out.Payload = &pb.Request_WakeVirtualCluster{WakeVirtualCluster: &pb.WakeVirtualClusterPayload{VirtualCluster: p.Sleep.VirtualCluster}}
	case p.Sleep != nil:
		out.Payload = &pb.Request_SleepVirtualCluster{SleepVirtualCluster: &pb.SleepVirtualClusterPayload{VirtualCluster: p.Sleep.VirtualCluster}}
	}
}

// checkDisplayName bounds free text the UI shows.
func checkDisplayName(v *errs.Violations, field, s string) {
	if len(s) > 256 {
		v.Add(field, "must be at most 256 characters")
	}
	if strings.ContainsRune(s, 0) {
		v.Add(field, "must not contain NUL characters")
	}
}

// maskPaths validates an update mask against the allowed paths; empty or
// "*" selects them all.
//
// grpc-gateway derives the mask of a REST PATCH from the fields present in
// the body, so two more forms are accepted: output-only fields (name, etag,
// create_time, update_time), which are ignored rather than refused (a client
// sends the etag in the body to get the optimistic-concurrency check), and
// sub-fields of a quota ("quota.gpu"), which select the parent too and are
// applied by maskedQuota.
func maskPaths(paths []string, allowed ...string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(paths) == 0 || (len(paths) == 1 && paths[0] == "*") {
		for _, p := range allowed {
			out[p] = true
		}
		return out, nil
	}
	whole := map[string]bool{}
	for _, asked := range paths {
		p := maskPath(asked)
		switch parent, sub, _ := strings.Cut(p, "."); {
		case slices.Contains(allowed, p):
			out[p], whole[p] = true, true
		case slices.Contains(outputOnlyPaths, p):
		case slices.Contains(allowed, parent) && slices.Contains(quotaParents, parent) && isQuotaField(sub):
			out[parent], out[p] = true, true
		default:
			names := allowed
			if asked != p { // the caller wrote JSON names; answer in kind
				names = make([]string, len(allowed))
				for i, a := range allowed {
					names[i] = errs.JSONFieldPath(a)
				}
			}
			return nil, errs.InvalidField("update_mask", "path %q cannot be updated; updatable: %s", asked, strings.Join(names, ", "))
		}
	}
	// A whole quota in the mask wins over its sub-fields.
	for p := range out {
		if parent, _, ok := strings.Cut(p, "."); ok && whole[parent] {
			delete(out, p)
		}
	}
	return out, nil
}

// maskPath reads one update-mask path in proto form: REST callers write
// JSON names (displayName, quotaBudget.cpuMillis), as FieldMask's JSON form
// does, and a quota's quantity fields (quota.cpu, quota.memory, what the
// gateway derives from a body that used them) select the amounts they set.
func maskPath(p string) string {
	p = errs.ProtoFieldPath(p)
	if parent, sub, ok := strings.Cut(p, "."); ok && slices.Contains(quotaParents, parent) {
		switch sub {
		case "cpu":
			return parent + "." + quota.ResourceCPU.Field()
		case "memory":
			return parent + "." + quota.ResourceMemory.Field()
		}
	}
	return p
}

// outputOnlyPaths may appear in a mask but are never updated. Immutable
// fields (a team's department, a member's principal) are listed too, so a
// client can PATCH back a whole object it read; the handlers refuse a
// changed value.
var outputOnlyPaths = []string{"name", "uid", "etag", "create_time", "update_time", "department", "user", "group"}

// quotaParents are the Quota-typed fields whose sub-fields a mask may name.
var quotaParents = []string{"quota", "quota_budget"}

func isQuotaField(f string) bool {
	for _, k := range quota.AllResources {
		if k.Field() == f {
			return true
		}
	}
	return false
}

// maskedQuota is the quota an update leaves: body when the mask names field
// as a whole, otherwise cur with only the masked sub-fields taken from body.
func maskedQuota(paths map[string]bool, field string, cur, body quota.Resources) quota.Resources {
	next, partial := cur, false
	for _, k := range quota.AllResources {
		if paths[field+"."+k.Field()] {
			next, partial = next.With(k, body.Get(k)), true
		}
	}
	if !partial {
		return body
	}
	return next
}
