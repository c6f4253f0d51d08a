package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/pkg/client"
)

func TestItemsIteratesEveryPage(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true})
	ctx := t.Context()
	alice := newClient(t, client.Config{Address: e.App.GRPCAddr(), Insecure: true, TokenFunc: client.StaticToken(e.Token(t, "alice"))})
	for i := range 5 {
		if _, err := alice.Members.CreateMember(ctx, &pb.CreateMemberRequest{Parent: "teams/team-a", MemberId: fmt.Sprintf("g%d", i),
			Member: &pb.Member{Principal: &pb.Member_Group{Group: fmt.Sprintf("group-%d", i)}, Role: pb.TeamRole_VIEWER}}); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	list := func(ctx context.Context, r *pb.ListMembersRequest, o ...grpc.CallOption) (*pb.ListMembersResponse, error) {
		calls++
		return alice.Members.ListMembers(ctx, r, o...)
	}
	req := &pb.ListMembersRequest{Parent: "teams/team-a", PageSize: 2}

	var names []string
	for m, err := range client.Items(ctx, list, req, (*pb.ListMembersResponse).GetMembers) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m.GetName())
	}
	// Seeded bob and carol, plus the five groups: 7 members on 4 pages.
	if len(names) != 7 || calls != 4 {
		t.Errorf("%d members in %d calls, want 7 in 4: %v", len(names), calls, names)
	}
	slices.Sort(names)
	if len(slices.Compact(names)) != 7 {
		t.Errorf("an item came twice: %v", names)
	}
	if req.GetPageToken() != "" {
		t.Errorf("the caller's request was modified: page token %q", req.GetPageToken())
	}

	// Breaking out fetches no further page.
	calls = 0
	for _, err := range client.Items(ctx, list, req, (*pb.ListMembersResponse).GetMembers) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if calls != 1 {
		t.Errorf("break after the first item made %d calls, want 1", calls)
	}

	// The typed helper, and an error ends the iteration with the error.
	n := 0
	for _, err := range alice.AllMembers(ctx, &pb.ListMembersRequest{Parent: "teams/team-a", PageSize: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 7 {
		t.Errorf("AllMembers: %d, want 7", n)
	}
	var errs []error
	for m, err := range alice.AllTeams(ctx, &pb.ListTeamsRequest{Filter: `owner = "bob"`}) {
		if m != nil {
			t.Errorf("item %v with a bad filter", m)
		}
		errs = append(errs, err)
	}
	if len(errs) != 1 || !client.IsInvalidArgument(errs[0]) || !client.HasReason(errs[0], client.ReasonInvalidFilter) {
		t.Errorf("bad filter: %v", errs)
	}
}

func TestWaitHelpers(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true})
	ctx := t.Context()
	bob := newClient(t, client.Config{Address: e.App.GRPCAddr(), Insecure: true, TokenFunc: client.StaticToken(e.Token(t, "bob"))})
	alice := newClient(t, client.Config{Address: e.App.GRPCAddr(), Insecure: true, TokenFunc: client.StaticToken(e.Token(t, "alice"))})

	r, err := bob.Requests.CreateRequest(ctx, &pb.CreateRequestRequest{Request: &pb.Request{Team: "teams/team-a",
		Payload: &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
			VirtualClusterId: "wait-vc", Spec: &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: "1"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	vcName := r.GetCreateVirtualCluster().GetVirtualCluster()

	// Pending approval: the wait runs until its deadline, reporting the
	// phase once.
	var seen []string
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = bob.WaitForVirtualCluster(short, vcName, client.WaitOptions{PollInterval: 20 * time.Millisecond,
		Progress: func(vc *pb.VirtualCluster) { seen = append(seen, vc.GetStatus().GetPhase().String()) }})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("pending: %v, want the deadline", err)
	}
	if !slices.Equal(seen, []string{"PENDING_APPROVAL"}) {
		t.Errorf("progress %v, want PENDING_APPROVAL once", seen)
	}
	got, err := bob.WaitForVirtualCluster(ctx, vcName, client.WaitOptions{}, pb.VirtualClusterStatus_PENDING_APPROVAL)
	if err != nil || got.GetStatus().GetPhase() != pb.VirtualClusterStatus_PENDING_APPROVAL {
		t.Errorf("awaiting PENDING_APPROVAL: %v %v", got.GetStatus().GetPhase(), err)
	}

	if _, err := alice.Requests.RejectRequest(ctx, &pb.RejectRequestRequest{Name: r.GetName(), Reason: "use the shared pool"}); err != nil {
		t.Fatal(err)
	}
	final, err := bob.WaitForRequest(ctx, r.GetName(), client.WaitOptions{PollInterval: 20 * time.Millisecond})
	var nr *client.NotReachableError
	if !errors.As(err, &nr) || nr.State != "REJECTED" || nr.Message != "use the shared pool" || final.GetState() != pb.Request_REJECTED {
		t.Errorf("WaitForRequest after reject: %v %v", final.GetState(), err)
	}
	_, err = bob.WaitForVirtualCluster(ctx, vcName, client.WaitOptions{PollInterval: 20 * time.Millisecond})
	if !errors.As(err, &nr) || nr.State != "REJECTED" {
		t.Errorf("WaitForVirtualCluster after reject: %v", err)
	}
	// Told the request, the wait explains with its decision.
	_, err = bob.WaitForVirtualCluster(ctx, vcName, client.WaitOptions{PollInterval: 20 * time.Millisecond, Request: r.GetName()})
	if !errors.As(err, &nr) || nr.Name != r.GetName() || nr.Decider != "user-alice" ||
		err.Error() != r.GetName()+" is REJECTED by user-alice: use the shared pool" {
		t.Errorf("WaitForVirtualCluster with its request after reject: %v", err)
	}

	_, err = bob.WaitForRequest(ctx, "requests/nope", client.WaitOptions{})
	if !client.IsNotFound(err) || client.IsQuotaExceeded(err) {
		t.Errorf("unknown request: %v", err)
	}
}

// The SDK's reason constants are the server's, all of them: every
// Reason* string constant in the server's packages (not only internal/errs:
// the store, the REST guard, placement and kubeconfig define their own).
func TestReasonsMatchServer(t *testing.T) {
	var server []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Reason") {
				return true
			}
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				if !slices.Contains(server, s) {
					server = append(server, s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sdk := slices.Clone(client.Reasons)
	slices.Sort(server)
	slices.Sort(sdk)
	if len(server) < 10 || !slices.Equal(server, sdk) {
		t.Errorf("server reasons %v\nSDK reasons    %v", server, sdk)
	}
}
