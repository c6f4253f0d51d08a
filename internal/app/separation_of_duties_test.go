package app_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// TestRequesterCannotDecide: in a department with requester_cannot_decide
// (the default), a department admin who asked for something can neither
// approve nor reject it (PERMISSION_DENIED, reason
// REQUESTER_CANNOT_DECIDE, nothing changes); another admin can. A platform
// admin may decide their own request, audited as ApproveOwnRequest. Only
// platform admins turn the setting off, and then the requester decides.
func TestRequesterCannotDecide(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	dept := apiCall(e.Departments.GetDepartment(e.As(t, "frank"), &pb.GetDepartmentRequest{Name: "departments/research"})).must(t)
	if dept.RequesterCannotDecide == nil || !dept.GetRequesterCannotDecide() || dept.GetUid() == "" {
		t.Fatalf("research: requester_cannot_decide %v uid %q, want true by default and a uid", dept.RequesterCannotDecide, dept.GetUid())
	}

	franks := wfCreate(t, e, "frank", wfSmallVC("team-a", "sod-franks"))
	_, err := e.Requests.ApproveRequest(e.As(t, "frank"), &pb.ApproveRequestRequest{Name: franks.GetName()})
	if f := wfExpect(t, err, codes.PermissionDenied, "REQUESTER_CANNOT_DECIDE"); f.Metadata["request"] != franks.GetName() {
		t.Errorf("ErrorInfo metadata %v does not name the request", f.Metadata)
	}
	_, err = e.Requests.RejectRequest(e.As(t, "frank"), &pb.RejectRequestRequest{Name: franks.GetName(), Reason: "mine"})
	wfExpect(t, err, codes.PermissionDenied, "REQUESTER_CANNOT_DECIDE")
	if got := wfGetRequest(t, e, franks.GetName()); got.GetState() != pb.Request_PENDING || got.GetEtag() != franks.GetEtag() {
		t.Errorf("refused decisions changed the request: %v %s", got.GetState(), got.GetEtag())
	}
	// Over REST too: 403 with the reason.
	r := e.Do(t, "frank", "POST", "/v1/"+franks.GetName()+":approve", map[string]any{})
	if f := wfRESTFailure(t, r); r.Status != 403 || f.Reason != "REQUESTER_CANNOT_DECIDE" {
		t.Errorf("REST approve of one's own request: %d %+v", r.Status, f)
	}
	// Someone else decides it.
	wfApprove(t, e, "alice", franks.GetName())

	// A platform admin overrides, and the audit log says so.
	alices := wfCreate(t, e, "alice", wfSmallVC("team-a", "sod-alices"))
	wfApprove(t, e, "alice", alices.GetName())
	if got := wfAuditActions(t, e, alices.GetName()); !slices.Equal(got, []string{"CreateRequest", "ApproveOwnRequest"}) {
		t.Errorf("audit of a platform admin approving their own request: %v", got)
	}
	alices2 := wfCreate(t, e, "alice", wfSmallVC("team-a", "sod-alices-2"))
	if _, err := e.Requests.RejectRequest(e.As(t, "alice"), &pb.RejectRequestRequest{Name: alices2.GetName(), Reason: "changed my mind"}); err != nil {
		t.Fatal(err)
	}
	if got := wfAuditActions(t, e, alices2.GetName()); !slices.Equal(got, []string{"CreateRequest", "RejectOwnRequest"}) {
		t.Errorf("audit of a platform admin rejecting their own request: %v", got)
	}

	// The department's admin may not switch it off (nor change the
	// department otherwise); the platform admin may.
	off := func(user string) error {
		_, err := e.Departments.UpdateDepartment(e.As(t, user), &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/research", RequesterCannotDecide: proto.Bool(false)},
			UpdateMask: apiMask("requester_cannot_decide")})
		return err
	}
	wfExpect(t, off("frank"), codes.PermissionDenied, "PERMISSION_DENIED")
	if err := off("alice"); err != nil {
		t.Fatal(err)
	}
	if got := apiCall(e.Departments.GetDepartment(e.As(t, "frank"), &pb.GetDepartmentRequest{Name: "departments/research"})).must(t); got.GetRequesterCannotDecide() {
		t.Fatal("requester_cannot_decide is still on")
	}
	franks2 := wfCreate(t, e, "frank", wfSmallVC("team-a", "sod-franks-2"))
	wfApprove(t, e, "frank", franks2.GetName())
	if got := wfAuditActions(t, e, franks2.GetName()); !slices.Equal(got, []string{"CreateRequest", "ApproveRequest"}) {
		t.Errorf("audit with separation of duties off: %v", got)
	}
	// A department created with it off says so.
	d := apiCall(e.Departments.CreateDepartment(e.As(t, "alice"), &pb.CreateDepartmentRequest{DepartmentId: "lab",
		Department: &pb.Department{DisplayName: "Lab", QuotaBudget: apiQuota("0", 1000, apiGiB), RequesterCannotDecide: proto.Bool(false)}})).must(t)
	if d.RequesterCannotDecide == nil || d.GetRequesterCannotDecide() {
		t.Errorf("lab: requester_cannot_decide %v, want false", d.RequesterCannotDecide)
	}
}
