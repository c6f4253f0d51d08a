package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// The domain's typed names must stay the proto enum names: they are stored
// in the database and rendered through pb.*_value lookups.
func TestStateNamesMatchProto(t *testing.T) {
	check := func(what string, got []string, values map[string]int32) {
		t.Helper()
		for _, s := range got {
			if _, ok := values[s]; !ok {
				t.Errorf("%s %q is not a proto enum value", what, s)
			}
		}
		if len(got) != len(values)-1 {
			t.Errorf("%d %ss, the proto has %d (besides UNSPECIFIED)", len(got), what, len(values)-1)
		}
	}
	check("request state", strs(request.States), pb.Request_State_value)
	check("request kind", strs(request.Kinds), pb.Request_Kind_value)
	check("phase", virtualcluster.PhasesWhere(virtualcluster.Phase.Valid), pb.VirtualClusterStatus_Phase_value)
	check("tier", strs(tenancy.Tiers), pb.IsolationTier_value)
	check("role", strs(tenancy.Roles), pb.TeamRole_value)
	check("condition status", []string{string(virtualcluster.ConditionTrue), string(virtualcluster.ConditionFalse), string(virtualcluster.ConditionUnknown)},
		pb.Condition_Status_value)
}

func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// sameJSON compares two documents as values (jsonb does not keep key order
// or whitespace either).
func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: domain JSON: %v", what, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: protojson: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n domain    %s\n protojson %s", what, got, want)
	}
}

var auditJSON = protojson.MarshalOptions{UseProtoNames: true}

// snapshotIs pins a domain Snapshot (what audit events store) to the
// protojson rendering of the same resource through the API conversion.
func snapshotIs(t *testing.T, what string, snapshot any, m proto.Message) {
	t.Helper()
	got, err := json.Marshal(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	want, err := auditJSON.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, what, got, want)
}

var (
	t0      = time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	t1      = time.Date(2026, 3, 4, 5, 6, 8, 0, time.UTC)
	tNano   = time.Date(2026, 3, 4, 5, 6, 9, 1, time.UTC)
	q1      = quota.Resources{GPU: 150, CPUMillis: 16000, MemoryBytes: 64 << 30}
	limit1  = quota.Resources{GPU: 200, CPUMillis: 32000, MemoryBytes: 128 << 30}
	policy1 = "small"
	target1 = int64(3)
)

func TestAuditSnapshotsMatchTheAPI(t *testing.T) {
	for _, d := range []tenancy.Department{
		{ID: "research", DisplayName: "Research", Budget: q1, AdminGroups: []string{"a", "b"}, Version: 3, Created: t0, Updated: t1},
		{ID: "empty", Version: 1, Created: t1, Updated: t1},
	} {
		snapshotIs(t, "department "+d.ID, d.Snapshot(), departmentToProto(d))
	}
	for _, tm := range []tenancy.Team{
		{ID: "team-a", Department: "research", DisplayName: "A", Tier: tenancy.TierShared, Pool: "shared", Quota: q1, Version: 2, Created: t0, Updated: t1},
		{ID: "team-b", Department: "research", Tier: tenancy.TierDedicated, Pool: "dedicated-team-b", Version: 1, Created: t0, Updated: t0},
	} {
		snapshotIs(t, "team "+tm.ID, tm.Snapshot(), teamToProto(tm))
	}
	for _, m := range []tenancy.Member{
		{Team: "team-a", ID: "bob", Kind: tenancy.KindUser, Principal: "bob@example.com", Role: tenancy.RoleOwner, Version: 1, Created: t0, Updated: t0},
		{Team: "team-a", ID: "eng", Kind: tenancy.KindGroup, Principal: "ml-engineers", Role: tenancy.RoleViewer, Version: 4, Created: t0, Updated: t1},
	} {
		snapshotIs(t, "member "+m.ID, m.Snapshot(), memberToProto(m))
	}
	for _, p := range []request.Policy{
		{ID: "small", DisplayName: "Small", Expression: "true", Seq: 1, Version: 1, Created: t0, Updated: t0},
		{ID: "off", Expression: "false", Disabled: true, Seq: 2, Version: 2, Created: t0, Updated: t1},
	} {
		snapshotIs(t, "policy "+p.ID, p.Snapshot(), policyToProto(p))
	}
	for _, v := range sampleVirtualClusters() {
		snapshotIs(t, "virtual cluster "+v.ID, v.Snapshot(), virtualClusterToProto(v))
	}
	snapshotIs(t, "drift snapshot", sampleVirtualClusters()[0].Snapshot().WithMessage("repaired drift: x"),
		func() proto.Message {
			m := virtualClusterToProto(sampleVirtualClusters()[0])
			m.Status.Message = "repaired drift: x"
			return m
		}())
	for _, r := range sampleRequests() {
		snapshotIs(t, "request "+string(r.Kind), r.Snapshot(), requestToProto(r))
	}
}

func sampleVirtualClusters() []virtualcluster.VirtualCluster {
	exp := t1.Add(time.Hour)
	return []virtualcluster.VirtualCluster{
		{ID: "ml-dev", Team: "team-a", Spec: virtualcluster.Spec{DisplayName: "ML", Quota: q1, Limit: &limit1, OverQuotaWeight: 2,
			Priority: 100, AllowFractionalGPUs: true, KubernetesVersion: "v1.31.1", ChartVersion: "0.20.0", ExpireTime: &exp},
			Phase: virtualcluster.PhaseReady, Generation: 2, ObservedGeneration: 2, Endpoint: "https://x", StatusMessage: "",
			Conditions: []virtualcluster.Condition{
				{Type: "NamespaceReady", Status: virtualcluster.ConditionTrue, Reason: "Exists", ObservedGeneration: 2, LastTransitionTime: tNano},
				{Type: "ReleaseDeployed", Status: virtualcluster.ConditionFalse, Reason: "NotDeployed", Message: "no release", ObservedGeneration: 1, LastTransitionTime: t0},
			},
			Allocated: quota.Resources{GPU: 50}, Version: 7, Created: t0, Updated: t1},
		{ID: "pending", Team: "team-b", Spec: virtualcluster.Spec{Quota: quota.Resources{CPUMillis: 1}},
			Phase: virtualcluster.PhasePendingApproval, Conditions: []virtualcluster.Condition{}, Version: 1, Created: t0, Updated: t0},
	}
}

func sampleRequests() []request.Request {
	vc := "ml-dev"
	exp := t1.Add(time.Hour)
	decided := t1
	return []request.Request{
		{ID: "r1", Seq: 1, Team: "team-a", Department: "research", Kind: request.KindCreateVirtualCluster, VirtualCluster: &vc,
			Payload: request.Payload{Create: &request.CreatePayload{VirtualClusterID: vc, VirtualCluster: "teams/team-a/virtualClusters/ml-dev",
				Spec: virtualcluster.Spec{DisplayName: "x", Quota: q1, Limit: &limit1, OverQuotaWeight: 1, Priority: 100, KubernetesVersion: "v1", ChartVersion: "0.20.0", ExpireTime: &exp}}},
			Justification: "why", State: request.StateApproved, Requester: "sub-bob", Decider: "policy:small", DecideTime: &decided,
			DecisionReason: "auto", ApprovalPolicy: &policy1, TargetGeneration: &target1, Version: 2, Created: t0, Updated: t1},
		{ID: "r2", Seq: 2, Team: "team-a", Department: "research", Kind: request.KindChangeVirtualClusterQuota, VirtualCluster: &vc,
			Payload: request.Payload{ChangeVCQuota: &request.ChangeVCQuotaPayload{VirtualCluster: "teams/team-a/virtualClusters/ml-dev", Quota: q1, AcceptPreemption: true}},
			State:   request.StatePending, Requester: "sub-bob", Version: 1, Created: t0, Updated: t0},
		{ID: "r3", Seq: 3, Team: "team-a", Department: "research", Kind: request.KindChangeTeamQuota,
			Payload: request.Payload{ChangeTeamQuota: &request.ChangeTeamQuotaPayload{Quota: quota.Resources{}}},
			State:   request.StateFailed, FailureMessage: "boom", Requester: "sub-bob", Version: 1, Created: t0, Updated: t0},
		{ID: "r4", Seq: 4, Team: "team-a", Department: "research", Kind: request.KindDeleteVirtualCluster, VirtualCluster: &vc,
			Payload: request.Payload{Delete: &request.DeletePayload{VirtualCluster: "teams/team-a/virtualClusters/ml-dev"}},
			State:   request.StateCancelled, Requester: "sub-bob", Version: 1, Created: t0, Updated: t0},
		{ID: "r5", Seq: 5, Team: "team-a", Department: "research", Kind: request.KindChangeVirtualClusterVersion, VirtualCluster: &vc,
			Payload: request.Payload{ChangeVersion: &request.ChangeVersionPayload{VirtualCluster: "teams/team-a/virtualClusters/ml-dev",
				ChartVersion: "0.36.1", KubernetesVersion: "v1.30.2"}},
			State: request.StateApplied, Requester: "sub-bob", Version: 3, Created: t0, Updated: t1},
	}
}

// The payload column has always held protojson (default, lowerCamelCase
// names) of a Request with only its payload set: what the domain writes
// must equal it, and rows protojson wrote must read back the same.
func TestPayloadColumnIsProtojson(t *testing.T) {
	for _, r := range sampleRequests() {
		got, err := request.EncodePayload(r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		m := &pb.Request{}
		payloadToProto(r.Payload, m)
		want, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "payload "+string(r.Kind), got, want)
		back, err := request.DecodePayload(want)
		if err != nil {
			t.Fatalf("decode protojson payload: %v", err)
		}
		if !reflect.DeepEqual(back, r.Payload) {
			t.Errorf("payload %s read back as %+v, want %+v", r.Kind, back, r.Payload)
		}
	}
}

// The conditions column has always held a JSON array of protojson
// Condition objects.
func TestConditionsColumnIsProtojson(t *testing.T) {
	conds := sampleVirtualClusters()[0].Conditions
	got, err := virtualcluster.EncodeConditions(conds)
	if err != nil {
		t.Fatal(err)
	}
	var items []json.RawMessage
	for _, c := range conditionsToProto(conds) {
		b, err := protojson.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, b)
	}
	want, _ := json.Marshal(items)
	sameJSON(t, "conditions", got, want)
	back, err := virtualcluster.DecodeConditions(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(conds) {
		t.Fatalf("read back %d conditions", len(back))
	}
	for i := range conds {
		if !back[i].LastTransitionTime.Equal(conds[i].LastTransitionTime) {
			t.Errorf("condition %d time %v, want %v", i, back[i].LastTransitionTime, conds[i].LastTransitionTime)
		}
		back[i].LastTransitionTime = conds[i].LastTransitionTime
		if back[i] != conds[i] {
			t.Errorf("condition %d read back as %+v, want %+v", i, back[i], conds[i])
		}
	}
}
