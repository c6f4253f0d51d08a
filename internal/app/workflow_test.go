package app_test

// Tests for the self-service workflow: requests, decisions, the quota
// hierarchy, auto-approval policies and expiry, all through the real server
// (gRPC and REST) on a real database. Helpers shared with
// workflow_authz_test.go and workflow_race_test.go live here and start
// with "wf".

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
)

const wfGiB = int64(1) << 30

// ---------------------------------------------------------------- helpers

// wfFailure is an API error, from gRPC or from a REST body.
type wfFailure struct {
	Code       codes.Code
	Message    string
	Reason     string
	Metadata   map[string]string
	Violations map[string]string // field -> description
}

func wfFailureOf(st *status.Status) wfFailure {
	f := wfFailure{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}, Violations: map[string]string{}}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			f.Reason = d.GetReason()
			for k, v := range d.GetMetadata() {
				f.Metadata[k] = v
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				f.Violations[v.GetField()] = v.GetDescription()
			}
		}
	}
	return f
}

// wfExpect fails the test unless err has code (and reason, when given).
func wfExpect(t testing.TB, err error, code codes.Code, reason string) wfFailure {
	t.Helper()
	st, _ := status.FromError(err)
	f := wfFailureOf(st)
	if f.Code != code || (reason != "" && f.Reason != reason) {
		t.Fatalf("got %v %q (reason %q), want %v %s", f.Code, f.Message, f.Reason, code, reason)
	}
	return f
}

// wfRESTFailure decodes a REST error body (a google.rpc.Status).
func wfRESTFailure(t testing.TB, r apptest.Response) wfFailure {
	t.Helper()
	var s spb.Status
	if err := protojson.Unmarshal(r.Body, &s); err != nil {
		t.Fatalf("decode error body %s: %v", r.Body, err)
	}
	return wfFailureOf(status.FromProto(&s))
}

// wfREST checks the HTTP status and decodes a success body into out.
func wfREST(t testing.TB, r apptest.Response, wantStatus int, out proto.Message) {
	t.Helper()
	if r.Status != wantStatus {
		t.Fatalf("HTTP %d, want %d: %s", r.Status, wantStatus, r.Body)
	}
	if out != nil {
		if err := protojson.Unmarshal(r.Body, out); err != nil {
			t.Fatalf("decode %s: %v", r.Body, err)
		}
	}
}

func wfSubject(user string) string { return oidcdev.Subject(user) }

func wfQuota(gpu string, cpuMillis, memBytes int64) *pb.Quota {
	return &pb.Quota{Gpu: gpu, CpuMillis: cpuMillis, MemoryBytes: memBytes}
}

// wfCreateVC is a CREATE_VIRTUAL_CLUSTER request.
func wfCreateVC(team, id string, spec *pb.VirtualClusterSpec) *pb.Request {
	return &pb.Request{
		Team: "teams/" + team, Justification: "test",
		Payload: &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
			VirtualClusterId: id, Spec: spec,
		}},
	}
}

// wfSmallVC asks for a tiny CPU-only virtual cluster: it fits anywhere, so
// tests that are about something else can create many.
func wfSmallVC(team, id string) *pb.Request {
	return wfCreateVC(team, id, &pb.VirtualClusterSpec{Quota: wfQuota("0", 10, 0)})
}

func wfGPUVC(team, id, gpu string) *pb.Request {
	return wfCreateVC(team, id, &pb.VirtualClusterSpec{Quota: wfQuota(gpu, 1000, wfGiB)})
}

func wfChangeVCQuota(team, vc string, q *pb.Quota, accept bool) *pb.Request {
	return &pb.Request{Team: "teams/" + team, Payload: &pb.Request_ChangeVirtualClusterQuota{
		ChangeVirtualClusterQuota: &pb.ChangeVirtualClusterQuotaPayload{
			VirtualCluster: "teams/" + team + "/virtualClusters/" + vc, Quota: q, AcceptPreemption: accept}}}
}

func wfChangeTeamQuota(team string, q *pb.Quota) *pb.Request {
	return &pb.Request{Team: "teams/" + team, Payload: &pb.Request_ChangeTeamQuota{
		ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{Quota: q}}}
}

func wfDeleteVC(team, vc string) *pb.Request {
	return &pb.Request{Team: "teams/" + team, Payload: &pb.Request_DeleteVirtualCluster{
		DeleteVirtualCluster: &pb.DeleteVirtualClusterPayload{VirtualCluster: "teams/" + team + "/virtualClusters/" + vc}}}
}

func wfCreate(t testing.TB, e *apptest.Env, user string, r *pb.Request) *pb.Request {
	t.Helper()
	out, err := e.Requests.CreateRequest(e.As(t, user), &pb.CreateRequestRequest{Request: r})
	if err != nil {
		t.Fatalf("%s: CreateRequest: %v", user, err)
	}
	return out
}

func wfApprove(t testing.TB, e *apptest.Env, user, name string) *pb.Request {
	t.Helper()
	out, err := e.Requests.ApproveRequest(e.As(t, user), &pb.ApproveRequestRequest{Name: name})
	if err != nil {
		t.Fatalf("%s: ApproveRequest %s: %v", user, name, err)
	}
	return out
}

func wfGetRequest(t testing.TB, e *apptest.Env, name string) *pb.Request {
	t.Helper()
	out, err := e.Requests.GetRequest(e.As(t, "alice"), &pb.GetRequestRequest{Name: name})
	if err != nil {
		t.Fatalf("GetRequest %s: %v", name, err)
	}
	return out
}

func wfGetVC(t testing.TB, e *apptest.Env, team, id string) *pb.VirtualCluster {
	t.Helper()
	out, err := e.VirtualCluster.GetVirtualCluster(e.As(t, "alice"),
		&pb.GetVirtualClusterRequest{Name: "teams/" + team + "/virtualClusters/" + id})
	if err != nil {
		t.Fatalf("GetVirtualCluster %s: %v", id, err)
	}
	return out
}

func wfPhase(t testing.TB, e *apptest.Env, team, id string) pb.VirtualClusterStatus_Phase {
	t.Helper()
	return wfGetVC(t, e, team, id).GetStatus().GetPhase()
}

// wfCount runs a SELECT count(*) ... against the server's database.
func wfCount(t testing.TB, e *apptest.Env, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.App.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func wfExec(t testing.TB, e *apptest.Env, sql string, args ...any) {
	t.Helper()
	if _, err := e.App.Pool().Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// wfAuditActions lists the actions recorded for resource, oldest first.
func wfAuditActions(t testing.TB, e *apptest.Env, resource string) []string {
	t.Helper()
	resp, err := e.Audit.ListAuditEvents(e.As(t, "alice"), &pb.ListAuditEventsRequest{
		PageSize: 500, Filter: fmt.Sprintf("resource = %q", resource)})
	if err != nil {
		t.Fatalf("ListAuditEvents: %v", err)
	}
	var out []string
	for _, ev := range slices.Backward(resp.GetAuditEvents()) {
		out = append(out, ev.GetAction())
	}
	return out
}

func wfID(name string) string { return name[strings.LastIndex(name, "/")+1:] }

// ---------------------------------------------------------------- 1. state machine through the API

// TestWorkflowDecisionsOnPending: approve, reject and cancel each work on a
// pending request and do what they say to the request and its virtual
// cluster.
func TestWorkflowDecisionsOnPending(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})

	approved := wfApprove(t, e, "alice", wfCreate(t, e, "bob", wfSmallVC("team-a", "dec-approve")).GetName())
	if approved.GetState() != pb.Request_APPROVED || approved.GetDecider() != wfSubject("alice") || approved.GetDecideTime() == nil {
		t.Errorf("approve: state %v decider %q decide_time %v", approved.GetState(), approved.GetDecider(), approved.GetDecideTime())
	}
	if p := wfPhase(t, e, "team-a", "dec-approve"); p != pb.VirtualClusterStatus_PROVISIONING {
		t.Errorf("approved virtual cluster is %v, want PROVISIONING", p)
	}

	pending := wfCreate(t, e, "bob", wfSmallVC("team-a", "dec-reject"))
	rejected, err := e.Requests.RejectRequest(e.As(t, "frank"), &pb.RejectRequestRequest{Name: pending.GetName(), Reason: "not this quarter"})
	if err != nil {
		t.Fatal(err)
	}
	if rejected.GetState() != pb.Request_REJECTED || rejected.GetDecider() != wfSubject("frank") || rejected.GetDecisionReason() != "not this quarter" {
		t.Errorf("reject: state %v decider %q reason %q", rejected.GetState(), rejected.GetDecider(), rejected.GetDecisionReason())
	}
	if p := wfPhase(t, e, "team-a", "dec-reject"); p != pb.VirtualClusterStatus_REJECTED {
		t.Errorf("rejected virtual cluster is %v, want REJECTED", p)
	}

	pending = wfCreate(t, e, "bob", wfSmallVC("team-a", "dec-cancel"))
	cancelled, err := e.Requests.CancelRequest(e.As(t, "bob"), &pb.CancelRequestRequest{Name: pending.GetName(), Etag: pending.GetEtag()})
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.GetState() != pb.Request_CANCELLED || cancelled.GetDecider() != wfSubject("bob") {
		t.Errorf("cancel: state %v decider %q", cancelled.GetState(), cancelled.GetDecider())
	}
	if p := wfPhase(t, e, "team-a", "dec-cancel"); p != pb.VirtualClusterStatus_REJECTED {
		t.Errorf("virtual cluster of a cancelled request is %v, want REJECTED", p)
	}
	// Only the requester cancels: frank asked for team-a, so its owner bob
	// may read the request but not cancel it; frank may.
	franks := wfCreate(t, e, "frank", wfSmallVC("team-a", "dec-franks"))
	for _, user := range []string{"bob", "alice"} {
		_, err := e.Requests.CancelRequest(e.As(t, user), &pb.CancelRequestRequest{Name: franks.GetName()})
		wfExpect(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	}
	if _, err := e.Requests.CancelRequest(e.As(t, "frank"), &pb.CancelRequestRequest{Name: franks.GetName()}); err != nil {
		t.Errorf("frank cancels his own request: %v", err)
	}

	for name, want := range map[string][]string{
		approved.GetName():  {"CreateRequest", "ApproveRequest"},
		rejected.GetName():  {"CreateRequest", "RejectRequest"},
		cancelled.GetName(): {"CreateRequest", "CancelRequest"},
	} {
		if got := wfAuditActions(t, e, name); !slices.Equal(got, want) {
			t.Errorf("audit of %s: %v, want %v", name, got, want)
		}
	}
}

// TestWorkflowStateTransitionsRefused: once decided, a request cannot be
// decided again, through gRPC (FAILED_PRECONDITION) or REST (400), and the
// failed attempt changes nothing.
func TestWorkflowStateTransitionsRefused(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})

	// Each action as the user who may take it on a pending request.
	type action struct {
		verb, user string
		grpc       func(ctx context.Context, name string) error
	}
	actions := []action{
		{"approve", "alice", func(ctx context.Context, name string) error {
			_, err := e.Requests.ApproveRequest(ctx, &pb.ApproveRequestRequest{Name: name})
			return err
		}},
		{"reject", "alice", func(ctx context.Context, name string) error {
			_, err := e.Requests.RejectRequest(ctx, &pb.RejectRequestRequest{Name: name})
			return err
		}},
		{"cancel", "bob", func(ctx context.Context, name string) error {
			_, err := e.Requests.CancelRequest(ctx, &pb.CancelRequestRequest{Name: name})
			return err
		}},
	}
	targetState := map[string]string{"approve": "APPROVED", "reject": "REJECTED", "cancel": "CANCELLED"}
	n := 0
	for _, first := range actions {
		for _, second := range actions {
			t.Run(first.verb+"d_then_"+second.verb, func(t *testing.T) {
				n++
				req := wfCreate(t, e, "bob", wfSmallVC("team-a", fmt.Sprintf("sm-%d", n)))
				if err := first.grpc(e.As(t, first.user), req.GetName()); err != nil {
					t.Fatalf("first %s: %v", first.verb, err)
				}
				before := wfGetRequest(t, e, req.GetName())
				if got := before.GetState().String(); got != targetState[first.verb] {
					t.Fatalf("after %s the request is %s", first.verb, got)
				}

				f := wfExpect(t, second.grpc(e.As(t, second.user), req.GetName()), codes.FailedPrecondition, "INVALID_STATE_TRANSITION")
				if f.Metadata["state"] != before.GetState().String() || f.Metadata["targetState"] != targetState[second.verb] {
					t.Errorf("metadata %v", f.Metadata)
				}
				if !strings.Contains(f.Message, req.GetName()) {
					t.Errorf("message %q does not name the request", f.Message)
				}

				r := e.Do(t, second.user, "POST", "/v1/"+req.GetName()+":"+second.verb, map[string]any{})
				if r.Status != http.StatusBadRequest {
					t.Fatalf("REST %s: HTTP %d %s, want 400", second.verb, r.Status, r.Body)
				}
				if rf := wfRESTFailure(t, r); rf.Code != codes.FailedPrecondition || rf.Reason != "INVALID_STATE_TRANSITION" {
					t.Errorf("REST %s: %v %s", second.verb, rf.Code, rf.Reason)
				}

				after := wfGetRequest(t, e, req.GetName())
				if after.GetEtag() != before.GetEtag() || after.GetState() != before.GetState() || after.GetDecider() != before.GetDecider() {
					t.Errorf("refused %s changed the request: %v/%s -> %v/%s", second.verb, before.GetState(), before.GetEtag(), after.GetState(), after.GetEtag())
				}
				if got := wfAuditActions(t, e, req.GetName()); len(got) != 2 {
					t.Errorf("audit after a refused decision: %v, want CreateRequest and the first decision only", got)
				}
			})
		}
	}
}

// TestWorkflowStaleEtag: deciding on a version of the request that is no
// longer current is ABORTED (HTTP 409), and the right etag works.
func TestWorkflowStaleEtag(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})

	// frank reads the request; alice approves it meanwhile; frank's decision
	// on what he read is refused as stale, not as a state problem.
	req := wfCreate(t, e, "bob", wfSmallVC("team-a", "etag-1"))
	read, err := e.Requests.GetRequest(e.As(t, "frank"), &pb.GetRequestRequest{Name: req.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Requests.ApproveRequest(e.As(t, "alice"), &pb.ApproveRequestRequest{Name: req.GetName(), Etag: read.GetEtag()})
	if err != nil {
		t.Fatalf("approve with the current etag: %v", err)
	}
	_, err = e.Requests.ApproveRequest(e.As(t, "frank"), &pb.ApproveRequestRequest{Name: req.GetName(), Etag: read.GetEtag()})
	wfExpect(t, err, codes.Aborted, "ETAG_MISMATCH")
	_, err = e.Requests.RejectRequest(e.As(t, "frank"), &pb.RejectRequestRequest{Name: req.GetName(), Etag: read.GetEtag()})
	wfExpect(t, err, codes.Aborted, "ETAG_MISMATCH")

	// On a pending request a wrong etag leaves it pending.
	req = wfCreate(t, e, "bob", wfSmallVC("team-a", "etag-2"))
	r := e.Do(t, "alice", "POST", "/v1/"+req.GetName()+":approve", map[string]any{"etag": "1-stale"})
	if r.Status != http.StatusConflict {
		t.Fatalf("REST approve with a stale etag: HTTP %d %s, want 409", r.Status, r.Body)
	}
	if f := wfRESTFailure(t, r); f.Code != codes.Aborted || f.Reason != "ETAG_MISMATCH" || f.Metadata["resource"] != req.GetName() {
		t.Errorf("REST stale etag: %+v", f)
	}
	_, err = e.Requests.CancelRequest(e.As(t, "bob"), &pb.CancelRequestRequest{Name: req.GetName(), Etag: "1-stale"})
	wfExpect(t, err, codes.Aborted, "ETAG_MISMATCH")
	if got := wfGetRequest(t, e, req.GetName()); got.GetState() != pb.Request_PENDING || got.GetEtag() != req.GetEtag() {
		t.Fatalf("stale-etag attempts changed the request: %v %s", got.GetState(), got.GetEtag())
	}
	var approved pb.Request
	wfREST(t, e.Do(t, "alice", "POST", "/v1/"+req.GetName()+":approve", map[string]any{"etag": req.GetEtag()}), http.StatusOK, &approved)
	if approved.GetState() != pb.Request_APPROVED || approved.GetEtag() == req.GetEtag() {
		t.Errorf("approve with the current etag: %v, etag %q (was %q)", approved.GetState(), approved.GetEtag(), req.GetEtag())
	}
}

// ---------------------------------------------------------------- 2. the README walkthrough over REST

func TestWorkflowRESTWalkthrough(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})

	// bob asks for a 2-GPU virtual cluster for team-a.
	var asked pb.Request
	wfREST(t, e.Do(t, "bob", "POST", "/v1/requests", map[string]any{
		"team": "teams/team-a", "justification": "vision model fine-tuning",
		"createVirtualCluster": map[string]any{"virtualClusterId": "ml-dev",
			"spec": map[string]any{"quota": map[string]any{"gpu": "2", "cpuMillis": "16000", "memoryBytes": "68719476736"}}},
	}), http.StatusOK, &asked)
	if asked.GetState() != pb.Request_PENDING || asked.GetKind() != pb.Request_CREATE_VIRTUAL_CLUSTER ||
		asked.GetRequester() != wfSubject("bob") || asked.GetDepartment() != "departments/research" {
		t.Fatalf("created request: %v", &asked)
	}
	if got := asked.GetCreateVirtualCluster().GetVirtualCluster(); got != "teams/team-a/virtualClusters/ml-dev" {
		t.Errorf("payload names virtual cluster %q", got)
	}
	var vc pb.VirtualCluster
	wfREST(t, e.Do(t, "bob", "GET", "/v1/teams/team-a/virtualClusters/ml-dev", nil), http.StatusOK, &vc)
	if vc.GetStatus().GetPhase() != pb.VirtualClusterStatus_PENDING_APPROVAL || vc.GetSpec().GetQuota().GetGpu() != "2" {
		t.Fatalf("virtual cluster before approval: %v", &vc)
	}

	// It is in alice's inbox.
	var inbox pb.ListRequestsResponse
	wfREST(t, e.Do(t, "alice", "GET", "/v1/requests?filter="+url.QueryEscape("state = PENDING"), nil), http.StatusOK, &inbox)
	if len(inbox.GetRequests()) != 1 || inbox.GetRequests()[0].GetName() != asked.GetName() {
		t.Fatalf("alice's inbox: %v", inbox.GetRequests())
	}

	// alice approves: the virtual cluster is being provisioned and the
	// worker has a work item for it.
	var approved pb.Request
	wfREST(t, e.Do(t, "alice", "POST", "/v1/"+asked.GetName()+":approve", map[string]any{"reason": "ok for Q4"}), http.StatusOK, &approved)
	if approved.GetState() != pb.Request_APPROVED || approved.GetDecider() != wfSubject("alice") || approved.GetDecisionReason() != "ok for Q4" {
		t.Fatalf("approved request: %v", &approved)
	}
	wfREST(t, e.Do(t, "bob", "GET", "/v1/teams/team-a/virtualClusters/ml-dev", nil), http.StatusOK, &vc)
	if vc.GetStatus().GetPhase() != pb.VirtualClusterStatus_PROVISIONING {
		t.Fatalf("virtual cluster after approval is %v", vc.GetStatus().GetPhase())
	}
	if n := wfCount(t, e, `SELECT count(*) FROM reconcile_work WHERE virtual_cluster_id = 'ml-dev'`); n != 1 {
		t.Errorf("reconcile_work rows for ml-dev: %d, want 1", n)
	}
	wfREST(t, e.Do(t, "alice", "GET", "/v1/requests?filter="+url.QueryEscape("state = PENDING"), nil), http.StatusOK, &inbox)
	if len(inbox.GetRequests()) != 0 {
		t.Errorf("inbox after the decision: %v", inbox.GetRequests())
	}
	var events pb.ListAuditEventsResponse
	wfREST(t, e.Do(t, "alice", "GET", "/v1/auditEvents?filter="+url.QueryEscape(fmt.Sprintf("resource = %q", asked.GetName())), nil), http.StatusOK, &events)
	actors := map[string]string{}
	for _, ev := range events.GetAuditEvents() {
		actors[ev.GetAction()] = ev.GetActor()
	}
	if actors["CreateRequest"] != wfSubject("bob") || actors["ApproveRequest"] != wfSubject("alice") || len(events.GetAuditEvents()) != 2 {
		t.Errorf("audit events of the request: %v", events.GetAuditEvents())
	}

	// A team quota beyond the department budget is refused at approval:
	// research has 8 GPUs, team-b holds 2, so team-a can have 6 at most.
	var grow pb.Request
	wfREST(t, e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
		"changeTeamQuota": map[string]any{"quota": map[string]any{"gpu": "10", "cpuMillis": "32000", "memoryBytes": "274877906944"}}}),
		http.StatusOK, &grow)
	if grow.GetState() != pb.Request_PENDING {
		t.Fatalf("team quota request: %v", grow.GetState())
	}
	r := e.Do(t, "alice", "POST", "/v1/"+grow.GetName()+":approve", map[string]any{})
	if r.Status != http.StatusBadRequest {
		t.Fatalf("approving an over-budget team quota: HTTP %d %s", r.Status, r.Body)
	}
	f := wfRESTFailure(t, r)
	if f.Code != codes.FailedPrecondition || f.Reason != "QUOTA_EXCEEDED" {
		t.Fatalf("over budget: %v %s %q", f.Code, f.Reason, f.Message)
	}
	for _, want := range []string{"departments/research", "gpu", "6 GPU"} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("message %q does not contain %q", f.Message, want)
		}
	}
	if f.Metadata["name"] != "departments/research" || f.Metadata["level"] != "department" ||
		f.Metadata["resource"] != "gpu" || f.Metadata["free"] != "6 GPU" || f.Metadata["requested"] != "10 GPU" {
		t.Errorf("ErrorInfo metadata: %v", f.Metadata)
	}
	if _, ok := f.Violations["request.changeTeamQuota.quota.gpu"]; !ok { // REST: JSON names
		t.Errorf("field violations: %v", f.Violations)
	}
	var team pb.Team
	wfREST(t, e.Do(t, "bob", "GET", "/v1/teams/team-a", nil), http.StatusOK, &team)
	if team.GetQuota().GetGpu() != "4" {
		t.Errorf("team-a quota after a refused change: %v", team.GetQuota())
	}
	var stillPending pb.Request
	wfREST(t, e.Do(t, "alice", "GET", "/v1/"+grow.GetName(), nil), http.StatusOK, &stillPending)
	if stillPending.GetState() != pb.Request_PENDING {
		t.Errorf("a refused approval must leave the request pending, got %v", stillPending.GetState())
	}
	wfREST(t, e.Do(t, "alice", "POST", "/v1/"+grow.GetName()+":reject", map[string]any{"reason": "over budget"}), http.StatusOK, nil)

	// Auto-approval: small requests in research need no human.
	var pol pb.ApprovalPolicy
	wfREST(t, e.Do(t, "alice", "POST", "/v1/approvalPolicies?approvalPolicyId=small", map[string]any{
		"displayName": "small research asks", "expression": `request.gpu_delta <= 1.0 && department.name == "research"`,
	}), http.StatusOK, &pol)
	if pol.GetName() != "approvalPolicies/small" {
		t.Fatalf("policy: %v", &pol)
	}
	var auto pb.Request
	wfREST(t, e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
		"createVirtualCluster": map[string]any{"virtualClusterId": "notebook",
			"spec": map[string]any{"quota": map[string]any{"gpu": "1", "cpuMillis": "4000", "memoryBytes": "17179869184"}}}}),
		http.StatusOK, &auto)
	if auto.GetState() != pb.Request_APPROVED || auto.GetApprovalPolicy() != "approvalPolicies/small" ||
		auto.GetDecider() != "policy:small" || auto.GetDecideTime() == nil {
		t.Fatalf("1-GPU request under the policy: state %v policy %q decider %q", auto.GetState(), auto.GetApprovalPolicy(), auto.GetDecider())
	}
	wfREST(t, e.Do(t, "bob", "GET", "/v1/teams/team-a/virtualClusters/notebook", nil), http.StatusOK, &vc)
	if vc.GetStatus().GetPhase() != pb.VirtualClusterStatus_PROVISIONING {
		t.Errorf("auto-approved virtual cluster is %v", vc.GetStatus().GetPhase())
	}
	// ... but not a bigger one.
	var big pb.Request
	wfREST(t, e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
		"createVirtualCluster": map[string]any{"virtualClusterId": "bigger",
			"spec": map[string]any{"quota": map[string]any{"gpu": "1.5"}, "allowFractionalGpus": true}}}),
		http.StatusOK, &big)
	if big.GetState() != pb.Request_PENDING || big.GetApprovalPolicy() != "" {
		t.Errorf("1.5-GPU request: state %v policy %q", big.GetState(), big.GetApprovalPolicy())
	}

	// A policy with a typo is refused when it is saved, with the CEL error.
	r = e.Do(t, "alice", "POST", "/v1/approvalPolicies?approvalPolicyId=typo", map[string]any{
		"expression": `request.gpu_dleta <= 1.0 && department.name == "research"`})
	if r.Status != http.StatusBadRequest {
		t.Fatalf("policy with a typo: HTTP %d %s", r.Status, r.Body)
	}
	f = wfRESTFailure(t, r)
	desc, ok := f.Violations["approvalPolicy.expression"]
	if f.Code != codes.InvalidArgument || !ok || !strings.Contains(desc, "gpu_dleta") {
		t.Errorf("typo policy: %v %s violations %v", f.Code, f.Reason, f.Violations)
	}
	wfREST(t, e.Do(t, "alice", "GET", "/v1/approvalPolicies/typo", nil), http.StatusNotFound, nil)
}

// ---------------------------------------------------------------- 3. the quota hierarchy

// TestWorkflowHierarchy walks a table of asks in order against one
// department: research (8 GPU) with team-a (SHARED, 4 GPU), team-b
// (DEDICATED, 2 GPU) and team-c (SHARED, 1 GPU), each asked by an owner or
// admin and, when it is accepted, approved by alice.
func TestWorkflowHierarchy(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	if _, err := e.Teams.CreateTeam(e.As(t, "alice"), &pb.CreateTeamRequest{TeamId: "team-c", Team: &pb.Team{
		Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED, Quota: wfQuota("1", 4000, 16*wfGiB)}}); err != nil {
		t.Fatal(err)
	}
	frac := func(team, id, gpu string) *pb.Request {
		return wfCreateVC(team, id, &pb.VirtualClusterSpec{Quota: wfQuota(gpu, 0, 0), AllowFractionalGpus: true})
	}
	type outcome struct {
		code   codes.Code
		reason string
		field  string            // a field violation that must be present
		meta   map[string]string // ErrorInfo metadata that must be present
	}
	ok := outcome{code: codes.OK}
	invalid := func(field string) outcome {
		return outcome{code: codes.InvalidArgument, reason: "INVALID_FIELD", field: field}
	}
	spec := "request.create_virtual_cluster.spec."
	cases := []struct {
		name    string
		user    string
		req     *pb.Request
		setup   func(t *testing.T)
		create  outcome // CreateRequest
		approve outcome // ApproveRequest by alice, when created
		cancel  bool    // cancel a refused request so the next case may ask again
	}{
		{name: "shared 0.25 GPU", user: "alice", req: frac("team-c", "quarter", "0.25"), approve: ok},
		{name: "shared 0.75 GPU fills the 1-GPU team exactly", user: "alice", req: frac("team-c", "three-quarters", "0.75"), approve: ok},
		{name: "0.01 GPU more does not fit", user: "alice", req: frac("team-c", "one-more", "0.01"),
			approve: outcome{code: codes.FailedPrecondition, reason: "QUOTA_EXCEEDED", field: spec + "quota.gpu",
				meta: map[string]string{"level": "team", "name": "teams/team-c", "resource": "gpu", "free": "0 GPU", "requested": "0.01 GPU"}}},
		{name: "fraction without allow_fractional_gpus", user: "bob",
			req: wfCreateVC("team-a", "no-sharing", &pb.VirtualClusterSpec{Quota: wfQuota("0.5", 0, 0)}), create: invalid(spec + "quota.gpu")},
		{name: "DEDICATED: fractional GPU quota", user: "dan",
			req: wfCreateVC("team-b", "ded-frac", &pb.VirtualClusterSpec{Quota: wfQuota("0.5", 0, 0)}), create: invalid(spec + "quota.gpu")},
		{name: "DEDICATED: allow_fractional_gpus", user: "dan",
			req:    wfCreateVC("team-b", "ded-share", &pb.VirtualClusterSpec{Quota: wfQuota("1", 0, 0), AllowFractionalGpus: true}),
			create: invalid(spec + "allow_fractional_gpus")},
		{name: "DEDICATED: fractional GPU limit", user: "dan",
			req:    wfCreateVC("team-b", "ded-limit", &pb.VirtualClusterSpec{Quota: wfQuota("1", 0, 0), Limit: wfQuota("1.5", 0, 0)}),
			create: invalid(spec + "limit.gpu")},
		{name: "DEDICATED: whole GPUs fill the team", user: "dan",
			req: wfCreateVC("team-b", "ded-2", &pb.VirtualClusterSpec{Quota: wfQuota("2", 1000, wfGiB)}), approve: ok},
		{name: "DEDICATED: one GPU more does not fit", user: "dan", req: wfGPUVC("team-b", "ded-3", "1"),
			approve: outcome{code: codes.FailedPrecondition, reason: "QUOTA_EXCEEDED", meta: map[string]string{"name": "teams/team-b", "free": "0 GPU"}}},
		{name: "limit below quota", user: "bob",
			req:    wfCreateVC("team-a", "low-limit", &pb.VirtualClusterSpec{Quota: wfQuota("2", 1000, wfGiB), Limit: wfQuota("1", 1000, wfGiB)}),
			create: invalid(spec + "limit.gpu")},
		{name: "limit below quota (cpu)", user: "bob",
			req:    wfCreateVC("team-a", "low-limit", &pb.VirtualClusterSpec{Quota: wfQuota("2", 1000, wfGiB), Limit: wfQuota("2", 999, wfGiB)}),
			create: invalid(spec + "limit.cpu_millis")},
		{name: "VC with a limit above quota", user: "bob",
			req: wfCreateVC("team-a", "ml-dev", &pb.VirtualClusterSpec{Quota: wfQuota("2", 8000, 32*wfGiB), Limit: wfQuota("3", 8000, 32*wfGiB)}), approve: ok},
		{name: "VC larger than what is left of the team", user: "bob", req: wfGPUVC("team-a", "too-big", "3"),
			approve: outcome{code: codes.FailedPrecondition, reason: "QUOTA_EXCEEDED", meta: map[string]string{"name": "teams/team-a", "free": "2 GPU", "requested": "3 GPU"}}},
		{name: "shrink below allocation is refused", user: "bob", cancel: true,
			setup: func(t *testing.T) {
				// KAI reports 2 GPUs in use in ml-dev.
				wfExec(t, e, `UPDATE virtual_clusters SET alloc_gpu_centi = 200, alloc_cpu_millis = 6000 WHERE id = 'ml-dev'`)
			},
			req: wfChangeVCQuota("team-a", "ml-dev", wfQuota("1", 8000, 32*wfGiB), false),
			approve: outcome{code: codes.FailedPrecondition, reason: "BELOW_ALLOCATION",
				field: "request.change_virtual_cluster_quota.quota.gpu", meta: map[string]string{"resource": "gpu"}}},
		{name: "shrink below allocation with accept_preemption", user: "bob",
			req: wfChangeVCQuota("team-a", "ml-dev", wfQuota("1", 8000, 32*wfGiB), true), approve: ok},
		{name: "grow a VC within the team", user: "bob",
			req: wfChangeVCQuota("team-a", "ml-dev", wfQuota("4", 8000, 32*wfGiB), true), approve: ok},
		{name: "grow a VC beyond the team", user: "bob", cancel: true,
			req:     wfChangeVCQuota("team-a", "ml-dev", wfQuota("5", 8000, 32*wfGiB), true),
			approve: outcome{code: codes.FailedPrecondition, reason: "QUOTA_EXCEEDED", meta: map[string]string{"name": "teams/team-a", "free": "4 GPU"}}},
		{name: "DEDICATED: fractional VC quota change", user: "dan", req: wfChangeVCQuota("team-b", "ded-2", wfQuota("1.5", 1000, wfGiB), false),
			create: invalid("request.change_virtual_cluster_quota.quota.gpu")},
		{name: "team quota below its virtual clusters", user: "bob", cancel: true,
			req: wfChangeTeamQuota("team-a", wfQuota("3", 32000, 256*wfGiB)),
			approve: outcome{code: codes.FailedPrecondition, reason: "QUOTA_EXCEEDED",
				field: "request.change_team_quota.quota.gpu", meta: map[string]string{"level": "team", "name": "teams/team-a"}}},
		{name: "team quota beyond the department budget", user: "bob", cancel: true,
			req: wfChangeTeamQuota("team-a", wfQuota("5.5", 32000, 256*wfGiB)),
			approve: outcome{code: codes.FailedPrecondition, reason: "QUOTA_EXCEEDED",
				meta: map[string]string{"level": "department", "name": "departments/research", "free": "5 GPU"}}},
		{name: "DEDICATED: fractional team quota", user: "dan", req: wfChangeTeamQuota("team-b", wfQuota("2.5", 32000, 256*wfGiB)),
			create: invalid("request.change_team_quota.quota.gpu")},
		{name: "team quota exactly the rest of the budget", user: "bob",
			req: wfChangeTeamQuota("team-a", wfQuota("5", 32000, 256*wfGiB)), approve: ok},
	}
	check := func(t *testing.T, what string, err error, want outcome) {
		t.Helper()
		if want.code == codes.OK {
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return
		}
		f := wfExpect(t, err, want.code, want.reason)
		if want.field != "" {
			if _, ok := f.Violations[want.field]; !ok {
				t.Errorf("%s: no violation on %s: %v", what, want.field, f.Violations)
			}
		}
		for k, v := range want.meta {
			if f.Metadata[k] != v {
				t.Errorf("%s: metadata %s = %q, want %q (all: %v)", what, k, f.Metadata[k], v, f.Metadata)
			}
		}
	}
	for _, tc := range cases {
		ok := t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			created, err := e.Requests.CreateRequest(e.As(t, tc.user), &pb.CreateRequestRequest{Request: tc.req})
			check(t, "create", err, tc.create)
			if err != nil {
				return
			}
			if created.GetState() != pb.Request_PENDING {
				t.Fatalf("created request is %v", created.GetState())
			}
			_, err = e.Requests.ApproveRequest(e.As(t, "alice"), &pb.ApproveRequestRequest{Name: created.GetName()})
			check(t, "approve", err, tc.approve)
			after := wfGetRequest(t, e, created.GetName())
			if err != nil && after.GetState() != pb.Request_PENDING {
				t.Errorf("a refused approval left the request %v", after.GetState())
			}
			if err != nil && tc.cancel {
				if _, err := e.Requests.CancelRequest(e.As(t, tc.user), &pb.CancelRequestRequest{Name: created.GetName()}); err != nil {
					t.Fatal(err)
				}
			}
		})
		if !ok {
			t.FailNow() // later cases build on earlier ones
		}
	}

	// The end state, read back.
	if vc := wfGetVC(t, e, "team-a", "ml-dev"); vc.GetSpec().GetQuota().GetGpu() != "4" || vc.GetSpec().GetLimit() != nil ||
		vc.GetGeneration() != 3 {
		t.Errorf("ml-dev after two quota changes: quota %v limit %v generation %d", vc.GetSpec().GetQuota(), vc.GetSpec().GetLimit(), vc.GetGeneration())
	}
	for id, want := range map[string]pb.VirtualClusterStatus_Phase{
		"quarter": pb.VirtualClusterStatus_PROVISIONING, "three-quarters": pb.VirtualClusterStatus_PROVISIONING,
		"one-more": pb.VirtualClusterStatus_PENDING_APPROVAL, "too-big": pb.VirtualClusterStatus_PENDING_APPROVAL,
	} {
		team := "team-c"
		if id == "too-big" {
			team = "team-a"
		}
		if got := wfPhase(t, e, team, id); got != want {
			t.Errorf("%s is %v, want %v", id, got, want)
		}
	}
	team, err := e.Teams.GetTeam(e.As(t, "bob"), &pb.GetTeamRequest{Name: "teams/team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if team.GetQuota().GetGpu() != "5" {
		t.Errorf("team-a quota %v, want 5 GPU", team.GetQuota())
	}
}

// TestWorkflowCheckFit: the dry run answers for a request not yet created
// and for a stored one, naming level, resource and what is free, and
// writes nothing.
func TestWorkflowCheckFit(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	wfApprove(t, e, "alice", wfCreate(t, e, "bob", wfCreateVC("team-a", "ml-dev",
		&pb.VirtualClusterSpec{Quota: wfQuota("2", 16000, 64*wfGiB)})).GetName())

	type short struct{ level, name, resource, requested, free string }
	shortfalls := func(res *pb.FitResult) []short {
		var out []short
		for _, s := range res.GetShortfalls() {
			out = append(out, short{s.GetLevel(), s.GetName(), s.GetResource(), s.GetRequested(), s.GetFree()})
			if s.GetMessage() == "" {
				t.Errorf("shortfall without a message: %v", s)
			}
		}
		return out
	}
	fit := func(t *testing.T, user string, req *pb.CheckFitRequest) *pb.FitResult {
		t.Helper()
		res, err := e.Requests.CheckFit(e.As(t, user), req)
		if err != nil {
			t.Fatalf("CheckFit: %v", err)
		}
		return res
	}
	teamA := short{"team", "teams/team-a", "gpu", "3 GPU", "2 GPU"}

	t.Run("new request that does not fit", func(t *testing.T) {
		res := fit(t, "bob", &pb.CheckFitRequest{Request: wfGPUVC("team-a", "big", "3")})
		if got := shortfalls(res); res.GetFits() || !slices.Equal(got, []short{teamA}) {
			t.Errorf("fits=%v shortfalls %v", res.GetFits(), got)
		}
	})
	t.Run("new request short on two resources", func(t *testing.T) {
		res := fit(t, "bob", &pb.CheckFitRequest{Request: wfCreateVC("team-a", "big", &pb.VirtualClusterSpec{Quota: wfQuota("3", 20000, wfGiB)})})
		want := []short{teamA, {"team", "teams/team-a", "cpu", "20 CPU", "16 CPU"}}
		if got := shortfalls(res); res.GetFits() || !slices.Equal(got, want) {
			t.Errorf("fits=%v shortfalls %v", res.GetFits(), got)
		}
	})
	t.Run("new request that fits", func(t *testing.T) {
		res := fit(t, "bob", &pb.CheckFitRequest{Request: wfGPUVC("team-a", "ok", "2")})
		if !res.GetFits() || len(res.GetShortfalls()) != 0 {
			t.Errorf("2 GPUs in a team with 2 free: %v", res)
		}
	})
	t.Run("REST dry run of a new request", func(t *testing.T) {
		var res pb.FitResult
		wfREST(t, e.Do(t, "bob", "POST", "/v1/requests:checkFit", map[string]any{"request": map[string]any{"team": "teams/team-a",
			"createVirtualCluster": map[string]any{"virtualClusterId": "big", "spec": map[string]any{"quota": map[string]any{"gpu": "3"}}}}}),
			http.StatusOK, &res)
		if got := shortfalls(&res); res.GetFits() || !slices.Equal(got, []short{teamA}) {
			t.Errorf("fits=%v shortfalls %v", res.GetFits(), got)
		}
	})
	t.Run("dry runs create nothing", func(t *testing.T) {
		if n := wfCount(t, e, `SELECT count(*) FROM requests`); n != 1 {
			t.Errorf("%d requests stored, want 1", n)
		}
		if n := wfCount(t, e, `SELECT count(*) FROM virtual_clusters`); n != 1 {
			t.Errorf("%d virtual clusters stored, want 1", n)
		}
	})

	big := wfCreate(t, e, "bob", wfGPUVC("team-a", "big", "3"))
	small := wfCreate(t, e, "bob", wfGPUVC("team-a", "small", "1"))
	t.Run("stored request that does not fit", func(t *testing.T) {
		for _, user := range []string{"alice", "frank", "bob", "carol"} {
			res := fit(t, user, &pb.CheckFitRequest{Name: big.GetName()})
			if got := shortfalls(res); res.GetFits() || !slices.Equal(got, []short{teamA}) {
				t.Errorf("%s: fits=%v shortfalls %v", user, res.GetFits(), got)
			}
		}
		var res pb.FitResult
		wfREST(t, e.Do(t, "alice", "POST", "/v1/"+big.GetName()+":checkFit", map[string]any{}), http.StatusOK, &res)
		if got := shortfalls(&res); res.GetFits() || !slices.Equal(got, []short{teamA}) {
			t.Errorf("REST: fits=%v shortfalls %v", res.GetFits(), got)
		}
	})
	t.Run("stored request that fits", func(t *testing.T) {
		if res := fit(t, "alice", &pb.CheckFitRequest{Name: small.GetName()}); !res.GetFits() || len(res.GetShortfalls()) != 0 {
			t.Errorf("1 GPU in a team with 2 free: %v", res)
		}
	})
	t.Run("the answer follows what was approved since", func(t *testing.T) {
		wfApprove(t, e, "alice", small.GetName())
		res := fit(t, "alice", &pb.CheckFitRequest{Name: big.GetName()})
		if got := shortfalls(res); res.GetFits() || len(got) != 1 || got[0].free != "1 GPU" {
			t.Errorf("fits=%v shortfalls %v, want 1 GPU free", res.GetFits(), got)
		}
	})
	t.Run("stored team quota beyond the department", func(t *testing.T) {
		grow := wfCreate(t, e, "bob", wfChangeTeamQuota("team-a", wfQuota("10", 32000, 256*wfGiB)))
		res := fit(t, "frank", &pb.CheckFitRequest{Name: grow.GetName()})
		want := []short{{"department", "departments/research", "gpu", "10 GPU", "6 GPU"}}
		if got := shortfalls(res); res.GetFits() || !slices.Equal(got, want) {
			t.Errorf("fits=%v shortfalls %v", res.GetFits(), got)
		}
	})
	t.Run("shrink below allocation", func(t *testing.T) {
		wfExec(t, e, `UPDATE virtual_clusters SET alloc_gpu_centi = 200 WHERE id = 'ml-dev'`)
		req := wfChangeVCQuota("team-a", "ml-dev", wfQuota("1", 16000, 64*wfGiB), false)
		res := fit(t, "bob", &pb.CheckFitRequest{Request: req})
		got := res.GetShortfalls()
		if res.GetFits() || len(got) != 1 || got[0].GetLevel() != "allocation" || got[0].GetResource() != "gpu" {
			t.Errorf("fits=%v shortfalls %v", res.GetFits(), got)
		}
		req.GetChangeVirtualClusterQuota().AcceptPreemption = true
		if res := fit(t, "bob", &pb.CheckFitRequest{Request: req}); !res.GetFits() {
			t.Errorf("with accept_preemption: %v", res)
		}
	})
	t.Run("name or request is required", func(t *testing.T) {
		_, err := e.Requests.CheckFit(e.As(t, "bob"), &pb.CheckFitRequest{})
		wfExpect(t, err, codes.InvalidArgument, "INVALID_FIELD")
	})
}

// ---------------------------------------------------------------- 5. expiry

func TestWorkflowExpiry(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	e := apptest.Start(t, apptest.Options{Seed: true, Now: clock})
	ctx := context.Background()

	expiring := func(id string, in time.Duration) *pb.Request {
		r := wfSmallVC("team-a", id)
		if in != 0 {
			r.GetCreateVirtualCluster().GetSpec().ExpireTime = timestamppb.New(clock().Add(in))
		}
		return wfApprove(t, e, "alice", wfCreate(t, e, "bob", r).GetName())
	}
	expiring("short-lived", time.Hour)
	expiring("later", 3*time.Hour)
	expiring("forever", 0)
	// Expiry also passes over a virtual cluster that was never approved.
	pendingReq := wfSmallVC("team-a", "never-approved")
	pendingReq.GetCreateVirtualCluster().GetSpec().ExpireTime = timestamppb.New(clock().Add(time.Minute))
	wfCreate(t, e, "bob", pendingReq)
	// A pending resize of the expiring cluster is superseded by the delete.
	resize := wfCreate(t, e, "bob", wfChangeVCQuota("team-a", "short-lived", wfQuota("0", 20, 0), false))

	deletes := func() []*pb.Request {
		t.Helper()
		resp, err := e.Requests.ListRequests(e.As(t, "alice"), &pb.ListRequestsRequest{Filter: "kind = DELETE_VIRTUAL_CLUSTER"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRequests()
	}
	expire := func(want int) {
		t.Helper()
		n, err := e.App.Requests.ExpireVirtualClusters(ctx)
		if err != nil || n != want {
			t.Fatalf("ExpireVirtualClusters = %d, %v; want %d", n, err, want)
		}
	}

	expire(0)
	advance(2 * time.Hour)
	expire(1)
	got := deletes()
	if len(got) != 1 {
		t.Fatalf("delete requests after expiry: %v", got)
	}
	del := got[0]
	if del.GetState() != pb.Request_APPROVED || del.GetDecider() != "system:expiry" || del.GetRequester() != "system:expiry" ||
		del.GetDeleteVirtualCluster().GetVirtualCluster() != "teams/team-a/virtualClusters/short-lived" || del.GetDecideTime() == nil ||
		del.GetTeam() != "teams/team-a" || del.GetDepartment() != "departments/research" {
		t.Errorf("expiry's delete request: %v", del)
	}
	vc := wfGetVC(t, e, "team-a", "short-lived")
	if vc.GetStatus().GetPhase() != pb.VirtualClusterStatus_DELETING || vc.GetGeneration() != 2 {
		t.Errorf("expired virtual cluster: phase %v generation %d", vc.GetStatus().GetPhase(), vc.GetGeneration())
	}
	if n := wfCount(t, e, `SELECT count(*) FROM reconcile_work WHERE virtual_cluster_id = 'short-lived'`); n != 1 {
		t.Errorf("reconcile_work rows: %d", n)
	}
	if got := wfAuditActions(t, e, del.GetName()); !slices.Equal(got, []string{"CreateRequest", "ApproveRequest"}) {
		t.Errorf("audit of the delete request: %v", got)
	}
	if r := wfGetRequest(t, e, resize.GetName()); r.GetState() != pb.Request_CANCELLED || r.GetDecider() != "system:expiry" {
		t.Errorf("pending resize of the expired cluster: %v by %q", r.GetState(), r.GetDecider())
	}
	// Like every change, superseding it is in the audit log.
	if got := wfAuditActions(t, e, resize.GetName()); !slices.Equal(got, []string{"CreateRequest", "CancelRequest"}) {
		t.Errorf("audit of the superseded resize: %v", got)
	}
	for id, want := range map[string]pb.VirtualClusterStatus_Phase{
		"later": pb.VirtualClusterStatus_PROVISIONING, "forever": pb.VirtualClusterStatus_PROVISIONING,
		"never-approved": pb.VirtualClusterStatus_PENDING_APPROVAL,
	} {
		if got := wfPhase(t, e, "team-a", id); got != want {
			t.Errorf("%s is %v, want %v", id, got, want)
		}
	}

	// Running again finds nothing new.
	expire(0)
	expire(0)
	if got := deletes(); len(got) != 1 {
		t.Errorf("delete requests after repeated sweeps: %d", len(got))
	}

	advance(2 * time.Hour)
	expire(1)
	expire(0)
	if got := deletes(); len(got) != 2 || got[0].GetDeleteVirtualCluster().GetVirtualCluster() != "teams/team-a/virtualClusters/later" {
		t.Errorf("delete requests after the second expiry: %v", got)
	}
	if got := wfPhase(t, e, "team-a", "forever"); got != pb.VirtualClusterStatus_PROVISIONING {
		t.Errorf("forever is %v", got)
	}

	// expire_time is checked against the server's clock.
	past := wfSmallVC("team-a", "past")
	past.GetCreateVirtualCluster().GetSpec().ExpireTime = timestamppb.New(clock().Add(-time.Minute))
	_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: past})
	if f := wfExpect(t, err, codes.InvalidArgument, "INVALID_FIELD"); f.Violations["request.create_virtual_cluster.spec.expire_time"] == "" {
		t.Errorf("violations: %v", f.Violations)
	}
}

// ---------------------------------------------------------------- 7. validation

func TestWorkflowRequestValidation(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	wfApprove(t, e, "alice", wfCreate(t, e, "bob", wfSmallVC("team-a", "busy")).GetName())

	spec := "request.create_virtual_cluster."
	withSpec := func(id string, mod func(*pb.VirtualClusterSpec)) *pb.Request {
		r := wfSmallVC("team-a", id)
		mod(r.GetCreateVirtualCluster().GetSpec())
		return r
	}
	for _, tc := range []struct {
		name  string
		req   *pb.Request
		field string
	}{
		{"no request", nil, "request"},
		{"missing payload", &pb.Request{Team: "teams/team-a", Justification: "x"}, "request.payload"},
		{"missing team", &pb.Request{Payload: wfSmallVC("team-a", "x").Payload}, "request.team"},
		{"bad team name", &pb.Request{Team: "team-a", Payload: wfSmallVC("team-a", "x").Payload}, "request.team"},
		{"empty virtual cluster id", wfSmallVC("team-a", ""), spec + "virtual_cluster_id"},
		{"upper-case virtual cluster id", wfSmallVC("team-a", "ML_Dev"), spec + "virtual_cluster_id"},
		{"virtual cluster id ending in a dash", wfSmallVC("team-a", "ml-"), spec + "virtual_cluster_id"},
		// Host names are vc-<id> and must stay DNS labels (63): ids are at
		// most 60 characters.
		{"virtual cluster id of 61 characters", wfSmallVC("team-a", strings.Repeat("a", 61)), spec + "virtual_cluster_id"},
		{"missing spec", wfCreateVC("team-a", "x", nil), spec + "spec"},
		{"zero quota", wfCreateVC("team-a", "x", &pb.VirtualClusterSpec{Quota: wfQuota("0", 0, 0)}), spec + "spec.quota"},
		{"missing quota", wfCreateVC("team-a", "x", &pb.VirtualClusterSpec{}), spec + "spec.quota"},
		{"bad gpu amount", wfCreateVC("team-a", "x", &pb.VirtualClusterSpec{Quota: wfQuota("1.234", 0, 0)}), spec + "spec.quota.gpu"},
		{"negative cpu", wfCreateVC("team-a", "x", &pb.VirtualClusterSpec{Quota: wfQuota("1", -1, 0)}), spec + "spec.quota.cpu_millis"},
		{"expire_time in the past", withSpec("x", func(s *pb.VirtualClusterSpec) {
			s.ExpireTime = timestamppb.New(time.Now().Add(-time.Minute))
		}), spec + "spec.expire_time"},
		{"priority out of range", withSpec("x", func(s *pb.VirtualClusterSpec) { s.Priority = 1001 }), spec + "spec.priority"},
		{"justification too long", func() *pb.Request {
			r := wfSmallVC("team-a", "x")
			r.Justification = strings.Repeat("j", 4097)
			return r
		}(), "request.justification"},
		{"resize without a quota", wfChangeVCQuota("team-a", "busy", nil, false), "request.change_virtual_cluster_quota.quota"},
		{"resize of another team's cluster", &pb.Request{Team: "teams/team-a", Payload: &pb.Request_ChangeVirtualClusterQuota{
			ChangeVirtualClusterQuota: &pb.ChangeVirtualClusterQuotaPayload{VirtualCluster: "teams/team-b/virtualClusters/busy", Quota: wfQuota("0", 5, 0)}}},
			"request.change_virtual_cluster_quota.virtual_cluster"},
		{"bad virtual cluster name", &pb.Request{Team: "teams/team-a", Payload: &pb.Request_DeleteVirtualCluster{
			DeleteVirtualCluster: &pb.DeleteVirtualClusterPayload{VirtualCluster: "virtualClusters/busy"}}}, "request.delete_virtual_cluster.virtual_cluster"},
		{"team quota without a quota", wfChangeTeamQuota("team-a", nil), "request.change_team_quota.quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: tc.req})
			f := wfExpect(t, err, codes.InvalidArgument, "")
			if _, ok := f.Violations[tc.field]; !ok {
				t.Errorf("no violation on %s: %v (%s)", tc.field, f.Violations, f.Message)
			}
		})
	}
	t.Run("virtual cluster id of 60 characters", func(t *testing.T) {
		wfCreate(t, e, "bob", wfSmallVC("team-a", strings.Repeat("b", 60)))
	})
	t.Run("REST: missing payload is 400", func(t *testing.T) {
		r := e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a"})
		if r.Status != http.StatusBadRequest || wfRESTFailure(t, r).Violations["request.payload"] == "" {
			t.Errorf("HTTP %d %s", r.Status, r.Body)
		}
	})
	t.Run("unknown virtual cluster", func(t *testing.T) {
		_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: wfDeleteVC("team-a", "nope")})
		wfExpect(t, err, codes.NotFound, "NOT_FOUND")
		_, err = e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: wfChangeVCQuota("team-a", "nope", wfQuota("1", 0, 0), false)})
		wfExpect(t, err, codes.NotFound, "NOT_FOUND")
	})
	t.Run("virtual cluster not provisioned yet", func(t *testing.T) {
		wfCreate(t, e, "bob", wfSmallVC("team-a", "waiting"))
		_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: wfDeleteVC("team-a", "waiting")})
		wfExpect(t, err, codes.FailedPrecondition, "INVALID_STATE_TRANSITION")
	})
	t.Run("duplicate virtual cluster name", func(t *testing.T) {
		first := wfCreate(t, e, "bob", wfSmallVC("team-a", "dup"))
		_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: wfSmallVC("team-a", "dup")})
		wfExpect(t, err, codes.AlreadyExists, "ALREADY_EXISTS")
		// Names are unique across teams: they name KAI queues.
		_, err = e.Requests.CreateRequest(e.As(t, "dan"), &pb.CreateRequestRequest{Request: wfSmallVC("team-b", "dup")})
		wfExpect(t, err, codes.AlreadyExists, "ALREADY_EXISTS")
		_, err = e.Requests.CreateRequest(e.As(t, "dan"), &pb.CreateRequestRequest{Request: wfSmallVC("team-b", "busy")})
		wfExpect(t, err, codes.AlreadyExists, "ALREADY_EXISTS")
		r := e.Do(t, "dan", "POST", "/v1/requests", map[string]any{"team": "teams/team-b",
			"createVirtualCluster": map[string]any{"virtualClusterId": "dup", "spec": map[string]any{"quota": map[string]any{"cpuMillis": 10}}}})
		if r.Status != http.StatusConflict {
			t.Errorf("REST duplicate: HTTP %d %s, want 409", r.Status, r.Body)
		}
		// Once the first ask is rejected the name is free again; team-a's
		// rejected one stays team-a's (incarnations_test.go).
		if _, err := e.Requests.RejectRequest(e.As(t, "frank"), &pb.RejectRequestRequest{Name: first.GetName()}); err != nil {
			t.Fatal(err)
		}
		wfCreate(t, e, "dan", wfSmallVC("team-b", "dup"))
		if n := wfCount(t, e, `SELECT count(*) FROM virtual_clusters WHERE id = 'dup' AND phase NOT IN ('REJECTED', 'DELETED')`); n != 1 {
			t.Errorf("%d live virtual clusters named dup", n)
		}
		if n := wfCount(t, e, `SELECT count(*) FROM virtual_clusters WHERE id = 'dup' AND team_id = 'team-a' AND phase = 'REJECTED'`); n != 1 {
			t.Errorf("team-a's rejected dup: %d rows, want 1", n)
		}
	})
	t.Run("second pending request for a virtual cluster", func(t *testing.T) {
		resize := wfCreate(t, e, "bob", wfChangeVCQuota("team-a", "busy", wfQuota("0", 20, 0), false))
		for _, r := range []*pb.Request{
			wfChangeVCQuota("team-a", "busy", wfQuota("0", 30, 0), false),
			wfDeleteVC("team-a", "busy"),
		} {
			_, err := e.Requests.CreateRequest(e.As(t, "frank"), &pb.CreateRequestRequest{Request: r})
			if f := wfExpect(t, err, codes.AlreadyExists, "ALREADY_EXISTS"); !strings.Contains(f.Message, "teams/team-a/virtualClusters/busy") {
				t.Errorf("message %q does not name the virtual cluster", f.Message)
			}
		}
		if _, err := e.Requests.CancelRequest(e.As(t, "bob"), &pb.CancelRequestRequest{Name: resize.GetName()}); err != nil {
			t.Fatal(err)
		}
		wfCreate(t, e, "bob", wfDeleteVC("team-a", "busy"))
	})
	t.Run("second pending team quota request", func(t *testing.T) {
		wfCreate(t, e, "bob", wfChangeTeamQuota("team-a", wfQuota("5", 32000, 256*wfGiB)))
		_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: wfChangeTeamQuota("team-a", wfQuota("6", 32000, 256*wfGiB))})
		wfExpect(t, err, codes.AlreadyExists, "ALREADY_EXISTS")
		// Another team is not affected.
		wfCreate(t, e, "dan", wfChangeTeamQuota("team-b", wfQuota("1", 32000, 256*wfGiB)))
	})
	t.Run("idempotent create", func(t *testing.T) {
		req := &pb.CreateRequestRequest{Request: wfSmallVC("team-a", "idem"), RequestId: "retry-1"}
		a, err := e.Requests.CreateRequest(e.As(t, "bob"), req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Requests.CreateRequest(e.As(t, "bob"), req)
		if err != nil || b.GetName() != a.GetName() {
			t.Fatalf("retry: %v %v", b.GetName(), err)
		}
		req.Request.Justification = "different"
		_, err = e.Requests.CreateRequest(e.As(t, "bob"), req)
		wfExpect(t, err, codes.InvalidArgument, "REQUEST_ID_REUSED")
	})
}

// ---------------------------------------------------------------- policies

// TestWorkflowPolicies: auto-approval follows the policies as they are now.
func TestWorkflowPolicies(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	n := 0
	ask := func(t *testing.T, gpu string) *pb.Request {
		t.Helper()
		n++
		return wfCreate(t, e, "bob", wfGPUVC("team-a", fmt.Sprintf("p-%d", n), gpu))
	}
	createPolicy := func(t *testing.T, id, expr string, disabled bool) *pb.ApprovalPolicy {
		t.Helper()
		p, err := e.Policies.CreateApprovalPolicy(alice, &pb.CreateApprovalPolicyRequest{ApprovalPolicyId: id,
			ApprovalPolicy: &pb.ApprovalPolicy{Expression: expr, Disabled: disabled}})
		if err != nil {
			t.Fatalf("create policy %s: %v", id, err)
		}
		return p
	}

	t.Run("invalid expressions are refused", func(t *testing.T) {
		for _, expr := range []string{"", "request.gpu_dleta <= 1.0", "request.gpu_delta + 1.0", `request.kind == "CREATE_VCLUSTER"`, "request.gpu_delta <="} {
			_, err := e.Policies.CreateApprovalPolicy(alice, &pb.CreateApprovalPolicyRequest{ApprovalPolicyId: "bad",
				ApprovalPolicy: &pb.ApprovalPolicy{Expression: expr}})
			if f := wfExpect(t, err, codes.InvalidArgument, ""); f.Violations["approval_policy.expression"] == "" {
				t.Errorf("%q: violations %v", expr, f.Violations)
			}
		}
	})

	var gate *pb.ApprovalPolicy
	t.Run("a disabled policy approves nothing", func(t *testing.T) {
		gate = createPolicy(t, "gate", "request.gpu_delta <= 1.0", true)
		if r := ask(t, "1"); r.GetState() != pb.Request_PENDING {
			t.Errorf("request under a disabled policy: %v", r.GetState())
		}
	})
	t.Run("enabling it takes effect at once", func(t *testing.T) {
		var err error
		gate, err = e.Policies.UpdateApprovalPolicy(alice, &pb.UpdateApprovalPolicyRequest{
			ApprovalPolicy: &pb.ApprovalPolicy{Name: gate.GetName(), Etag: gate.GetEtag()},
			UpdateMask:     &fieldmaskpb.FieldMask{Paths: []string{"disabled"}}})
		if err != nil {
			t.Fatal(err)
		}
		if r := ask(t, "1"); r.GetState() != pb.Request_APPROVED || r.GetDecider() != "policy:gate" {
			t.Errorf("request under an enabled policy: %v by %q", r.GetState(), r.GetDecider())
		}
	})
	t.Run("a changed expression takes effect at once", func(t *testing.T) {
		var err error
		gate, err = e.Policies.UpdateApprovalPolicy(alice, &pb.UpdateApprovalPolicyRequest{
			ApprovalPolicy: &pb.ApprovalPolicy{Name: gate.GetName(), Etag: gate.GetEtag(), Expression: "request.gpu_delta <= 0.5"},
			UpdateMask:     &fieldmaskpb.FieldMask{Paths: []string{"expression"}}})
		if err != nil {
			t.Fatal(err)
		}
		if r := ask(t, "1"); r.GetState() != pb.Request_PENDING {
			t.Errorf("1 GPU under a 0.5 GPU policy: %v", r.GetState())
		}
		_, err = e.Policies.UpdateApprovalPolicy(alice, &pb.UpdateApprovalPolicyRequest{
			ApprovalPolicy: &pb.ApprovalPolicy{Name: gate.GetName(), Etag: gate.GetEtag(), Expression: "request.gpu_dleta <= 0.5"},
			UpdateMask:     &fieldmaskpb.FieldMask{Paths: []string{"expression"}}})
		wfExpect(t, err, codes.InvalidArgument, "")
		_, err = e.Policies.UpdateApprovalPolicy(alice, &pb.UpdateApprovalPolicyRequest{
			ApprovalPolicy: &pb.ApprovalPolicy{Name: gate.GetName(), Etag: "1-stale", Disabled: true},
			UpdateMask:     &fieldmaskpb.FieldMask{Paths: []string{"disabled"}}})
		wfExpect(t, err, codes.Aborted, "ETAG_MISMATCH")
	})
	t.Run("a policy deleted and created again under the same name", func(t *testing.T) {
		if _, err := e.Policies.DeleteApprovalPolicy(alice, &pb.DeleteApprovalPolicyRequest{Name: gate.GetName(), Etag: gate.GetEtag()}); err != nil {
			t.Fatal(err)
		}
		if r := ask(t, "1"); r.GetState() != pb.Request_PENDING {
			t.Errorf("request after the policy was deleted: %v", r.GetState())
		}
		createPolicy(t, "small", "request.gpu_delta <= 0.0", false)
		if r := ask(t, "1"); r.GetState() != pb.Request_PENDING {
			t.Fatalf("1 GPU under a 0-GPU policy: %v", r.GetState())
		}
		old, err := e.Policies.GetApprovalPolicy(alice, &pb.GetApprovalPolicyRequest{Name: "approvalPolicies/small"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Policies.DeleteApprovalPolicy(alice, &pb.DeleteApprovalPolicyRequest{Name: old.GetName()}); err != nil {
			t.Fatal(err)
		}
		recreated := createPolicy(t, "small", "request.gpu_delta <= 1.0", false)
		if recreated.GetEtag() == old.GetEtag() {
			t.Errorf("a recreated policy has the old etag %q", old.GetEtag())
		}
		// The new expression must be the one that decides.
		if r := ask(t, "1"); r.GetState() != pb.Request_APPROVED || r.GetApprovalPolicy() != "approvalPolicies/small" {
			t.Errorf("1 GPU under the recreated 1-GPU policy: %v (policy %q)", r.GetState(), r.GetApprovalPolicy())
		}
	})
	t.Run("a match that does not fit stays pending for a person", func(t *testing.T) {
		// team-a: 4 GPUs; policy "small" approved 1 so far.
		if _, err := e.Policies.UpdateApprovalPolicy(alice, &pb.UpdateApprovalPolicyRequest{
			ApprovalPolicy: &pb.ApprovalPolicy{Name: "approvalPolicies/small", Disabled: true},
			UpdateMask:     &fieldmaskpb.FieldMask{Paths: []string{"disabled"}}}); err != nil {
			t.Fatal(err)
		}
		createPolicy(t, "any", "true", false)
		before := wfCount(t, e, `SELECT count(*) FROM virtual_clusters WHERE team_id = 'team-a' AND phase = 'PROVISIONING'`)
		if before != 2 {
			t.Fatalf("%d provisioned virtual clusters in team-a, want 2", before)
		}
		// 2 GPUs used: 2 fit, then nothing more.
		if r := ask(t, "2"); r.GetState() != pb.Request_APPROVED || r.GetDecider() != "policy:any" {
			t.Fatalf("2 GPUs that fit: %v", r.GetState())
		}
		r := ask(t, "1")
		if r.GetState() != pb.Request_PENDING {
			t.Fatalf("1 GPU that does not fit: %v", r.GetState())
		}
		if got := wfAuditActions(t, e, r.GetName()); !slices.Equal(got, []string{"CreateRequest", "AutoApprovalSkipped"}) {
			t.Errorf("audit: %v", got)
		}
		_, err := e.Requests.ApproveRequest(alice, &pb.ApproveRequestRequest{Name: r.GetName()})
		wfExpect(t, err, codes.FailedPrecondition, "QUOTA_EXCEEDED")
	})
	t.Run("policies are listed in order", func(t *testing.T) {
		resp, err := e.Policies.ListApprovalPolicies(alice, &pb.ListApprovalPoliciesRequest{PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			for _, p := range resp.GetApprovalPolicies() {
				got = append(got, p.GetName())
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			if resp, err = e.Policies.ListApprovalPolicies(alice, &pb.ListApprovalPoliciesRequest{PageSize: 1, PageToken: resp.GetNextPageToken()}); err != nil {
				t.Fatal(err)
			}
		}
		if want := []string{"approvalPolicies/small", "approvalPolicies/any"}; !slices.Equal(got, want) {
			t.Errorf("policies %v, want %v", got, want)
		}
	})
}
