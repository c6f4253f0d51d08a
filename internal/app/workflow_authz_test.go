package app_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// How a demo user relates to a team.
type wfRel string

const (
	wfPlatformAdmin wfRel = "platform admin"
	wfDeptAdmin     wfRel = "department admin"
	wfOwner         wfRel = "owner"
	wfMember        wfRel = "member"
	wfOtherOwner    wfRel = "owner of another team"
	wfOtherMember   wfRel = "member of another team"
)

var wfUsers = []string{"alice", "frank", "bob", "carol", "dan", "erin"}

// wfRelations: team-a is bob's (carol member), team-b is dan's (erin
// member); both are in frank's department research.
var wfRelations = map[string]map[string]wfRel{
	"team-a": {"alice": wfPlatformAdmin, "frank": wfDeptAdmin, "bob": wfOwner, "carol": wfMember, "dan": wfOtherOwner, "erin": wfOtherMember},
	"team-b": {"alice": wfPlatformAdmin, "frank": wfDeptAdmin, "dan": wfOwner, "erin": wfMember, "bob": wfOtherOwner, "carol": wfOtherMember},
}

var wfOwners = map[string]string{"team-a": "bob", "team-b": "dan"}

// wfWant is the expected code per relation; relations not listed expect OK.
type wfWant map[wfRel]codes.Code

var (
	// Anyone with a role on the team and its department's admins read;
	// others must not learn that anything exists.
	wfReaders = wfWant{wfOtherOwner: codes.NotFound, wfOtherMember: codes.NotFound}
	// Owners and admins ask; a member reads but may not ask.
	wfAskers = wfWant{wfMember: codes.PermissionDenied, wfOtherOwner: codes.NotFound, wfOtherMember: codes.NotFound}
	// Admins decide; the team reads but may not decide, not even the owner
	// on his own request.
	wfDeciders = wfWant{wfOwner: codes.PermissionDenied, wfMember: codes.PermissionDenied,
		wfOtherOwner: codes.NotFound, wfOtherMember: codes.NotFound}
	// Only the requester (the owner, here) cancels.
	wfRequesterOnly = wfWant{wfPlatformAdmin: codes.PermissionDenied, wfDeptAdmin: codes.PermissionDenied, wfMember: codes.PermissionDenied,
		wfOtherOwner: codes.NotFound, wfOtherMember: codes.NotFound}
	wfEveryone = wfWant{}
)

// TestWorkflowAuthorizationMatrix calls every workflow RPC as every demo
// user on their own team and on the other one.
func TestWorkflowAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})

	fx := &wfFixture{e: e, shared: map[string]*pb.Request{}}
	shared := fx.shared
	// One pending request (and its virtual cluster) per team to read.
	for team, owner := range wfOwners {
		shared[team] = wfCreate(t, e, owner, wfSmallVC(team, "shared-"+team))
	}
	sharedVC := fx.sharedVC
	ops := wfOps(fx)
	for _, op := range ops {
		for _, team := range []string{"team-a", "team-b"} {
			for _, user := range wfUsers {
				rel := wfRelations[team][user]
				want, ok := op.want[rel]
				if !ok {
					want = codes.OK
				}
				t.Run(fmt.Sprintf("%s/%s/%s", op.rpc, team, user), func(t *testing.T) {
					err := op.call(t, e.As(t, user), team)
					if got := status.Code(err); got != want {
						t.Errorf("%s (%s of %s): %v, want %v", user, rel, team, err, want)
					}
				})
			}
		}
	}

	// Approval policies are platform-wide: platform admins manage them,
	// department admins read them, nobody else sees any. Changing them is
	// refused to everyone else before the name is looked at, so the answer
	// does not tell whether a policy exists.
	alice := e.As(t, "alice")
	fx.standing = fx.newPolicy(t)
	standing := fx.standing
	policyOps := wfPolicyOps(fx)
	for _, op := range policyOps {
		for _, user := range wfUsers {
			want, ok := op.want[user]
			if !ok {
				want = op.other
			}
			t.Run(op.rpc+"/"+user, func(t *testing.T) {
				err := op.call(t, e.As(t, user), user)
				if got := status.Code(err); got != want {
					t.Errorf("%s: %v, want %v", user, err, want)
				}
				if op.noPolicy != nil && user != "alice" {
					if got := status.Code(op.noPolicy(e.As(t, user))); got != want {
						t.Errorf("%s on a policy that does not exist: %v, want %v", user, got, want)
					}
				}
			})
		}
	}
	got, err := e.Policies.GetApprovalPolicy(alice, &pb.GetApprovalPolicyRequest{Name: standing.GetName()})
	if err != nil || got.GetDisplayName() != "renamed by alice" {
		t.Errorf("standing policy after the matrix: %v %v", got, err)
	}

	t.Run("anonymous callers are refused everywhere", func(t *testing.T) {
		ctx := context.Background()
		name := shared["team-a"].GetName()
		for rpc, call := range map[string]func() error{
			"CreateRequest": func() error {
				_, err := e.Requests.CreateRequest(ctx, &pb.CreateRequestRequest{Request: wfSmallVC("team-a", "anon")})
				return err
			},
			"GetRequest": func() error { _, err := e.Requests.GetRequest(ctx, &pb.GetRequestRequest{Name: name}); return err },
			"ListRequests": func() error {
				_, err := e.Requests.ListRequests(ctx, &pb.ListRequestsRequest{})
				return err
			},
			"CancelRequest": func() error {
				_, err := e.Requests.CancelRequest(ctx, &pb.CancelRequestRequest{Name: name})
				return err
			},
			"ApproveRequest": func() error {
				_, err := e.Requests.ApproveRequest(ctx, &pb.ApproveRequestRequest{Name: name})
				return err
			},
			"RejectRequest": func() error {
				_, err := e.Requests.RejectRequest(ctx, &pb.RejectRequestRequest{Name: name})
				return err
			},
			"CheckFit": func() error { _, err := e.Requests.CheckFit(ctx, &pb.CheckFitRequest{Name: name}); return err },
			"GetVirtualCluster": func() error {
				_, err := e.VirtualCluster.GetVirtualCluster(ctx, &pb.GetVirtualClusterRequest{Name: sharedVC("team-a")})
				return err
			},
			"ListVirtualClusters": func() error {
				_, err := e.VirtualCluster.ListVirtualClusters(ctx, &pb.ListVirtualClustersRequest{Parent: "teams/-"})
				return err
			},
			"GetApprovalPolicy": func() error {
				_, err := e.Policies.GetApprovalPolicy(ctx, &pb.GetApprovalPolicyRequest{Name: standing.GetName()})
				return err
			},
			"ListApprovalPolicies": func() error {
				_, err := e.Policies.ListApprovalPolicies(ctx, &pb.ListApprovalPoliciesRequest{})
				return err
			},
			"CreateApprovalPolicy": func() error {
				_, err := e.Policies.CreateApprovalPolicy(ctx, &pb.CreateApprovalPolicyRequest{ApprovalPolicyId: "anon",
					ApprovalPolicy: &pb.ApprovalPolicy{Expression: "true"}})
				return err
			},
			"UpdateApprovalPolicy": func() error {
				_, err := e.Policies.UpdateApprovalPolicy(ctx, &pb.UpdateApprovalPolicyRequest{ApprovalPolicy: standing})
				return err
			},
			"DeleteApprovalPolicy": func() error {
				_, err := e.Policies.DeleteApprovalPolicy(ctx, &pb.DeleteApprovalPolicyRequest{Name: standing.GetName()})
				return err
			},
		} {
			if got := status.Code(call()); got != codes.Unauthenticated {
				t.Errorf("%s without a token: %v", rpc, got)
			}
		}
		if got := wfGetRequest(t, e, name).GetState(); got != pb.Request_PENDING {
			t.Errorf("anonymous calls changed the request: %v", got)
		}
	})
}

// TestWorkflowListIsolation: lists show exactly what the caller may read,
// whatever the filter and page size; erin never sees team-a's requests and
// frank only his own department's.
func TestWorkflowListIsolation(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	// Another department with a team of its own, outside frank's reach.
	if _, err := e.Departments.CreateDepartment(alice, &pb.CreateDepartmentRequest{DepartmentId: "ops",
		Department: &pb.Department{QuotaBudget: wfQuota("4", 16000, 64*wfGiB)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: "team-x", Team: &pb.Team{
		Department: "departments/ops", IsolationTier: pb.IsolationTier_SHARED, Quota: wfQuota("2", 8000, 32*wfGiB)}}); err != nil {
		t.Fatal(err)
	}
	// Requests in every state, in every team.
	for _, asker := range []struct{ team, user string }{{"team-a", "bob"}, {"team-b", "dan"}, {"team-x", "alice"}} {
		for i, decide := range []string{"", "approve", "reject", "cancel", ""} {
			req := wfCreate(t, e, asker.user, wfSmallVC(asker.team, fmt.Sprintf("%s-%d", asker.team, i)))
			var err error
			switch decide {
			case "approve":
				_, err = e.Requests.ApproveRequest(alice, &pb.ApproveRequestRequest{Name: req.GetName()})
			case "reject":
				_, err = e.Requests.RejectRequest(alice, &pb.RejectRequestRequest{Name: req.GetName()})
			case "cancel":
				_, err = e.Requests.CancelRequest(e.As(t, asker.user), &pb.CancelRequestRequest{Name: req.GetName()})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	xReq, err := e.Requests.ListRequests(alice, &pb.ListRequestsRequest{Filter: `team = "teams/team-x" AND state = PENDING`, PageSize: 1})
	if err != nil || len(xReq.GetRequests()) != 1 {
		t.Fatalf("team-x's pending request: %v %v", xReq, err)
	}

	visible := map[string][]string{
		"alice": {"team-a", "team-b", "team-x"}, "frank": {"team-a", "team-b"},
		"bob": {"team-a"}, "carol": {"team-a"}, "dan": {"team-b"}, "erin": {"team-b"},
	}
	filters := []string{"", "state = PENDING", `team = "teams/team-a"`, `team = "teams/team-x"`,
		`department = "departments/research"`, `requester = "` + wfSubject("bob") + `"`, "kind = CREATE_VIRTUAL_CLUSTER"}
	for _, user := range wfUsers {
		ctx := e.As(t, user)
		for _, filter := range filters {
			t.Run(user+"/"+filter, func(t *testing.T) {
				// Everything the filter matches, for alice, limited to what
				// user may read, page by page.
				want := wfListTeams(t, alice, e, filter)
				want = slices.DeleteFunc(want, func(team string) bool { return !slices.Contains(visible[user], team) })
				if got := wfListTeams(t, ctx, e, filter); !slices.Equal(got, want) {
					t.Errorf("ListRequests(%q): teams %v, want %v", filter, got, want)
				}
			})
		}
		t.Run(user+"/virtual clusters", func(t *testing.T) {
			var got []string
			req := &pb.ListVirtualClustersRequest{Parent: "teams/-", PageSize: 2}
			for {
				resp, err := e.VirtualCluster.ListVirtualClusters(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				for _, vc := range resp.GetVirtualClusters() {
					team := strings.Split(vc.GetName(), "/")[1] // teams/{team}/virtualClusters/{id}
					if !slices.Contains(got, team) {
						got = append(got, team)
					}
				}
				if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
					break
				}
			}
			sort.Strings(got)
			if !slices.Equal(got, visible[user]) {
				t.Errorf("virtual clusters of %v, want %v", got, visible[user])
			}
		})
	}

	// frank cannot reach team-x's request by name either.
	name := xReq.GetRequests()[0].GetName()
	frank := e.As(t, "frank")
	for rpc, err := range map[string]error{
		"GetRequest": func() error { _, err := e.Requests.GetRequest(frank, &pb.GetRequestRequest{Name: name}); return err }(),
		"ApproveRequest": func() error {
			_, err := e.Requests.ApproveRequest(frank, &pb.ApproveRequestRequest{Name: name})
			return err
		}(),
		"RejectRequest": func() error {
			_, err := e.Requests.RejectRequest(frank, &pb.RejectRequestRequest{Name: name})
			return err
		}(),
		"CheckFit": func() error { _, err := e.Requests.CheckFit(frank, &pb.CheckFitRequest{Name: name}); return err }(),
	} {
		if status.Code(err) != codes.NotFound {
			t.Errorf("frank %s on team-x's request: %v, want NotFound", rpc, err)
		}
	}
}

// wfListTeams pages through ListRequests and returns the sorted set of
// teams the results belong to, checking newest-first order on the way.
func wfListTeams(t *testing.T, ctx context.Context, e *apptest.Env, filter string) []string {
	t.Helper()
	seen := map[string]bool{}
	var last *pb.Request
	req := &pb.ListRequestsRequest{Filter: filter, PageSize: 2}
	for {
		resp, err := e.Requests.ListRequests(ctx, req)
		if err != nil {
			t.Fatalf("ListRequests(%q): %v", filter, err)
		}
		for _, r := range resp.GetRequests() {
			if last != nil && r.GetCreateTime().AsTime().After(last.GetCreateTime().AsTime()) {
				t.Errorf("not newest first: %s after %s", r.GetName(), last.GetName())
			}
			last = r
			seen[wfID(r.GetTeam())] = true
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	out := make([]string, 0, len(seen))
	for team := range seen {
		out = append(out, team)
	}
	sort.Strings(out)
	return out
}

// wfFixture is what the workflow matrix's calls act on; the tables below
// read it only when a call runs, so wfOps(&wfFixture{}) lists the RPCs
// covered without a server (TestAuthzMatrixCoversEveryRPC).
type wfFixture struct {
	e        *apptest.Env
	n        int
	shared   map[string]*pb.Request // one pending request per team, to read
	standing *pb.ApprovalPolicy
}

func (fx *wfFixture) nextID() string { fx.n++; return fmt.Sprintf("authz-%d", fx.n) }

func (fx *wfFixture) sharedVC(team string) string {
	return fx.shared[team].GetCreateVirtualCluster().GetVirtualCluster()
}

// decideFresh runs a decision on a new pending request of the team's
// owner; a refused decision must leave it pending.
func (fx *wfFixture) decideFresh(t *testing.T, team string, decide func(name string) error) error {
	req := wfCreate(t, fx.e, wfOwners[team], wfSmallVC(team, fx.nextID()))
	err := decide(req.GetName())
	if got := wfGetRequest(t, fx.e, req.GetName()).GetState(); err != nil && got != pb.Request_PENDING {
		t.Errorf("a refused decision left the request %v", got)
	}
	return err
}

// sleepFresh runs a sleep or wake on a new approved virtual cluster of
// the team (put to sleep first by alice when the call wakes it). The
// desired sleep state must be what the call asked for when it succeeded
// and unchanged when it was refused.
func (fx *wfFixture) sleepFresh(t *testing.T, team string, sleep bool, call func(name string) error) error {
	t.Helper()
	id := fx.nextID()
	wfApprove(t, fx.e, "alice", wfCreate(t, fx.e, wfOwners[team], wfSmallVC(team, id)).GetName())
	name := "teams/" + team + "/virtualClusters/" + id
	if !sleep {
		if _, err := fx.e.VirtualCluster.SleepVirtualCluster(fx.e.As(t, "alice"), &pb.SleepVirtualClusterRequest{Name: name}); err != nil {
			t.Fatalf("alice puts %s to sleep: %v", name, err)
		}
	}
	before := wfGetVC(t, fx.e, team, id)
	err := call(name)
	after := wfGetVC(t, fx.e, team, id)
	switch {
	case err == nil && after.GetSpec().GetSleep() != sleep:
		t.Errorf("the call succeeded but %s has spec.sleep %v", name, after.GetSpec().GetSleep())
	case err != nil && (after.GetSpec().GetSleep() != before.GetSpec().GetSleep() || after.GetEtag() != before.GetEtag()):
		t.Errorf("a refused call changed %s: spec.sleep %v -> %v, etag %s -> %s", name,
			before.GetSpec().GetSleep(), after.GetSpec().GetSleep(), before.GetEtag(), after.GetEtag())
	}
	return err
}

func (fx *wfFixture) newPolicy(t *testing.T) *pb.ApprovalPolicy {
	p, err := fx.e.Policies.CreateApprovalPolicy(fx.e.As(t, "alice"), &pb.CreateApprovalPolicyRequest{
		ApprovalPolicyId: fx.nextID(), ApprovalPolicy: &pb.ApprovalPolicy{Expression: "request.gpu_delta > 1000.0"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wfOp is one row of the workflow matrix: an RPC called on each team.
type wfOp struct {
	rpc  string
	want wfWant
	call func(t *testing.T, ctx context.Context, team string) error
}

func wfOps(fx *wfFixture) []wfOp {
	return []wfOp{
		{"RequestService.CreateRequest", wfAskers, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.Requests.CreateRequest(ctx, &pb.CreateRequestRequest{Request: wfSmallVC(team, fx.nextID())})
			return err
		}},
		{"RequestService.GetRequest", wfReaders, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.Requests.GetRequest(ctx, &pb.GetRequestRequest{Name: fx.shared[team].GetName()})
			return err
		}},
		{"RequestService.ListRequests", wfEveryone, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.Requests.ListRequests(ctx, &pb.ListRequestsRequest{Filter: fmt.Sprintf("team = %q", "teams/"+team)})
			return err
		}},
		{"RequestService.CancelRequest", wfRequesterOnly, func(t *testing.T, ctx context.Context, team string) error {
			return fx.decideFresh(t, team, func(name string) error {
				_, err := fx.e.Requests.CancelRequest(ctx, &pb.CancelRequestRequest{Name: name})
				return err
			})
		}},
		{"RequestService.ApproveRequest", wfDeciders, func(t *testing.T, ctx context.Context, team string) error {
			return fx.decideFresh(t, team, func(name string) error {
				_, err := fx.e.Requests.ApproveRequest(ctx, &pb.ApproveRequestRequest{Name: name})
				return err
			})
		}},
		{"RequestService.RejectRequest", wfDeciders, func(t *testing.T, ctx context.Context, team string) error {
			return fx.decideFresh(t, team, func(name string) error {
				_, err := fx.e.Requests.RejectRequest(ctx, &pb.RejectRequestRequest{Name: name})
				return err
			})
		}},
		{"RequestService.CheckFit(stored)", wfReaders, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.Requests.CheckFit(ctx, &pb.CheckFitRequest{Name: fx.shared[team].GetName()})
			return err
		}},
		{"RequestService.CheckFit(new)", wfAskers, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.Requests.CheckFit(ctx, &pb.CheckFitRequest{Request: wfSmallVC(team, "dry-run")})
			return err
		}},
		{"VirtualClusterService.GetVirtualCluster", wfReaders, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.VirtualCluster.GetVirtualCluster(ctx, &pb.GetVirtualClusterRequest{Name: fx.sharedVC(team)})
			return err
		}},
		{"VirtualClusterService.ListVirtualClusters", wfReaders, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.VirtualCluster.ListVirtualClusters(ctx, &pb.ListVirtualClustersRequest{Parent: "teams/" + team})
			return err
		}},
		// Members use their virtual clusters (this one is still pending:
		// FAILED_PRECONDITION past the authorization check); admins who are
		// not members need break_glass.
		{"VirtualClusterService.GetVirtualClusterKubeconfig", wfWant{wfPlatformAdmin: codes.PermissionDenied, wfDeptAdmin: codes.PermissionDenied,
			wfOwner: codes.FailedPrecondition, wfMember: codes.FailedPrecondition, wfOtherOwner: codes.NotFound, wfOtherMember: codes.NotFound},
			func(t *testing.T, ctx context.Context, team string) error {
				_, err := fx.e.VirtualCluster.GetVirtualClusterKubeconfig(ctx, &pb.GetVirtualClusterKubeconfigRequest{Name: fx.sharedVC(team)})
				return err
			}},
		// Owners and admins put an approved virtual cluster to sleep and
		// wake it; members may only ask (a request).
		{"VirtualClusterService.SleepVirtualCluster", wfAskers, func(t *testing.T, ctx context.Context, team string) error {
			return fx.sleepFresh(t, team, true, func(name string) error {
				_, err := fx.e.VirtualCluster.SleepVirtualCluster(ctx, &pb.SleepVirtualClusterRequest{Name: name})
				return err
			})
		}},
		{"VirtualClusterService.WakeVirtualCluster", wfAskers, func(t *testing.T, ctx context.Context, team string) error {
			return fx.sleepFresh(t, team, false, func(name string) error {
				_, err := fx.e.VirtualCluster.WakeVirtualCluster(ctx, &pb.WakeVirtualClusterRequest{Name: name})
				return err
			})
		}},
		// Past the authorization check a virtual cluster still pending
		// approval cannot sleep: FAILED_PRECONDITION for those who may.
		{"VirtualClusterService.SleepVirtualCluster(pending)", wfWant{wfPlatformAdmin: codes.FailedPrecondition, wfDeptAdmin: codes.FailedPrecondition,
			wfOwner: codes.FailedPrecondition, wfMember: codes.PermissionDenied, wfOtherOwner: codes.NotFound, wfOtherMember: codes.NotFound},
			func(t *testing.T, ctx context.Context, team string) error {
				_, err := fx.e.VirtualCluster.SleepVirtualCluster(ctx, &pb.SleepVirtualClusterRequest{Name: fx.sharedVC(team)})
				return err
			}},
		{"VirtualClusterService.ListVirtualClusters(teams/-)", wfEveryone, func(t *testing.T, ctx context.Context, team string) error {
			_, err := fx.e.VirtualCluster.ListVirtualClusters(ctx, &pb.ListVirtualClustersRequest{Parent: "teams/-"})
			return err
		}},
	}
}

// wfPolicyOp is one row of the approval-policy matrix.
type wfPolicyOp struct {
	rpc      string
	want     map[string]codes.Code // users not listed: other
	other    codes.Code
	call     func(t *testing.T, ctx context.Context, user string) error
	noPolicy func(ctx context.Context) error // the same call on a name that does not exist
}

func wfPolicyOps(fx *wfFixture) []wfPolicyOp {
	readers := map[string]codes.Code{"alice": codes.OK, "frank": codes.OK}
	onlyAlice := map[string]codes.Code{"alice": codes.OK}
	return []wfPolicyOp{
		{"ApprovalPolicyService.GetApprovalPolicy", readers, codes.NotFound, func(t *testing.T, ctx context.Context, user string) error {
			_, err := fx.e.Policies.GetApprovalPolicy(ctx, &pb.GetApprovalPolicyRequest{Name: fx.standing.GetName()})
			return err
		}, nil},
		{"ApprovalPolicyService.ListApprovalPolicies", map[string]codes.Code{}, codes.OK, func(t *testing.T, ctx context.Context, user string) error {
			resp, err := fx.e.Policies.ListApprovalPolicies(ctx, &pb.ListApprovalPoliciesRequest{})
			if err == nil {
				_, reader := readers[user]
				if got := len(resp.GetApprovalPolicies()) > 0; got != reader {
					t.Errorf("sees policies: %v, want %v", got, reader)
				}
			}
			return err
		}, nil},
		{"ApprovalPolicyService.CreateApprovalPolicy", onlyAlice, codes.PermissionDenied, func(t *testing.T, ctx context.Context, user string) error {
			_, err := fx.e.Policies.CreateApprovalPolicy(ctx, &pb.CreateApprovalPolicyRequest{
				ApprovalPolicyId: fx.nextID(), ApprovalPolicy: &pb.ApprovalPolicy{Expression: "false"}})
			return err
		}, nil},
		{"ApprovalPolicyService.UpdateApprovalPolicy", onlyAlice, codes.PermissionDenied, func(t *testing.T, ctx context.Context, user string) error {
			_, err := fx.e.Policies.UpdateApprovalPolicy(ctx, &pb.UpdateApprovalPolicyRequest{
				ApprovalPolicy: &pb.ApprovalPolicy{Name: fx.standing.GetName(), DisplayName: "renamed by " + user},
				UpdateMask:     &fieldmaskpb.FieldMask{Paths: []string{"display_name"}}})
			return err
		}, func(ctx context.Context) error {
			_, err := fx.e.Policies.UpdateApprovalPolicy(ctx, &pb.UpdateApprovalPolicyRequest{
				ApprovalPolicy: &pb.ApprovalPolicy{Name: "approvalPolicies/nope", DisplayName: "x"},
				UpdateMask:     &fieldmaskpb.FieldMask{Paths: []string{"display_name"}}})
			return err
		}},
		{"ApprovalPolicyService.DeleteApprovalPolicy", onlyAlice, codes.PermissionDenied, func(t *testing.T, ctx context.Context, user string) error {
			p := fx.newPolicy(t)
			_, err := fx.e.Policies.DeleteApprovalPolicy(ctx, &pb.DeleteApprovalPolicyRequest{Name: p.GetName()})
			if err != nil {
				if _, gerr := fx.e.Policies.GetApprovalPolicy(fx.e.As(t, "alice"), &pb.GetApprovalPolicyRequest{Name: p.GetName()}); gerr != nil {
					t.Errorf("a refused delete removed the policy: %v", gerr)
				}
			}
			return err
		}, func(ctx context.Context) error {
			_, err := fx.e.Policies.DeleteApprovalPolicy(ctx, &pb.DeleteApprovalPolicyRequest{Name: "approvalPolicies/nope"})
			return err
		}},
	}
}
