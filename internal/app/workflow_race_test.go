package app_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// wfRace runs fn in n goroutines that are all started before any of them
// is released, so the calls really overlap, and returns their errors.
func wfRace(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return errs
}

// wfReasonOf is the ErrorInfo reason of a gRPC error ("" when none).
func wfReasonOf(err error) string {
	st, _ := status.FromError(err)
	return wfFailureOf(st).Reason
}

// TestWorkflowRaceTwoAdmins: two asks that each fit alone but not together
// (two 3-GPU virtual clusters in team-a's 4 GPUs) are approved at the same
// moment by two different admins. Exactly one may win, every time.
func TestWorkflowRaceTwoAdmins(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	admins := []context.Context{e.As(t, "alice"), e.As(t, "frank")}
	const rounds = 10
	for round := range rounds {
		reqs := []*pb.Request{
			wfCreate(t, e, "bob", wfGPUVC("team-a", fmt.Sprintf("race-%d-a", round), "3")),
			wfCreate(t, e, "bob", wfGPUVC("team-a", fmt.Sprintf("race-%d-b", round), "3")),
		}
		errs := wfRace(2, func(i int) error {
			// Alternate which admin takes which request.
			_, err := e.Requests.ApproveRequest(admins[(i+round)%2], &pb.ApproveRequestRequest{Name: reqs[i].GetName()})
			return err
		})
		winner, loser := -1, -1
		for i, err := range errs {
			switch {
			case err == nil:
				winner = i
			case status.Code(err) == codes.FailedPrecondition && wfReasonOf(err) == "QUOTA_EXCEEDED":
				loser = i
			default:
				t.Fatalf("round %d: approval %d failed with %v", round, i, err)
			}
		}
		if winner < 0 || loser < 0 {
			t.Fatalf("round %d: want exactly one approval to win, got errors %v", round, errs)
		}
		// The database agrees: team-a holds 3 GPUs in one provisioning
		// virtual cluster; the loser is still waiting for a person.
		if n := wfCount(t, e, `SELECT COALESCE(SUM(gpu_centi), 0) FROM virtual_clusters
			WHERE team_id = 'team-a' AND phase NOT IN ('PENDING_APPROVAL', 'REJECTED', 'DELETED')`); n != 300 {
			t.Fatalf("round %d: team-a holds %d centi-GPUs, want 300", round, n)
		}
		if got := wfGetRequest(t, e, reqs[loser].GetName()).GetState(); got != pb.Request_PENDING {
			t.Fatalf("round %d: losing request is %v", round, got)
		}
		if got := wfGetRequest(t, e, reqs[winner].GetName()).GetState(); got != pb.Request_APPROVED {
			t.Fatalf("round %d: winning request is %v", round, got)
		}

		// Clean up for the next round: reject the loser, and finish the
		// winner's deletion as the worker would once the host is clean.
		if _, err := e.Requests.RejectRequest(admins[1], &pb.RejectRequestRequest{Name: reqs[loser].GetName()}); err != nil {
			t.Fatal(err)
		}
		wfExec(t, e, `UPDATE virtual_clusters SET phase = 'DELETED' WHERE id = $1`,
			reqs[winner].GetCreateVirtualCluster().GetVirtualClusterId())
	}
}

// TestWorkflowRaceTeamQuotaAndVirtualCluster: a team-quota cut and a
// virtual-cluster grant that are fine alone but break the hierarchy
// together, decided at the same moment: one of them must lose.
func TestWorkflowRaceTeamQuotaAndVirtualCluster(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	admins := []context.Context{e.As(t, "alice"), e.As(t, "frank")}
	for round := range 10 {
		// team-a has 4 GPUs and nothing in use: cutting it to 2 fits, a
		// 3-GPU virtual cluster fits, both together do not.
		reqs := []*pb.Request{
			wfCreate(t, e, "bob", wfChangeTeamQuota("team-a", wfQuota("2", 32000, 256*wfGiB))),
			wfCreate(t, e, "bob", wfGPUVC("team-a", fmt.Sprintf("cut-%d", round), "3")),
		}
		errs := wfRace(2, func(i int) error {
			_, err := e.Requests.ApproveRequest(admins[(i+round)%2], &pb.ApproveRequestRequest{Name: reqs[i].GetName()})
			return err
		})
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case status.Code(err) != codes.FailedPrecondition || wfReasonOf(err) != "QUOTA_EXCEEDED":
				t.Fatalf("round %d: approval %d failed with %v", round, i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d approvals succeeded, want exactly 1 (%v)", round, ok, errs)
		}
		team, err := e.Teams.GetTeam(admins[0], &pb.GetTeamRequest{Name: "teams/team-a"})
		if err != nil {
			t.Fatal(err)
		}
		used := wfCount(t, e, `SELECT COALESCE(SUM(gpu_centi), 0) FROM virtual_clusters
			WHERE team_id = 'team-a' AND phase NOT IN ('PENDING_APPROVAL', 'REJECTED', 'DELETED')`)
		if (team.GetQuota().GetGpu() == "2") == (used == 300) {
			t.Fatalf("round %d: team-a quota %s GPU with %d centi-GPUs in virtual clusters", round, team.GetQuota().GetGpu(), used)
		}
		// Back to the start: 4 GPUs, nothing in use, nothing pending.
		for _, r := range reqs {
			if wfGetRequest(t, e, r.GetName()).GetState() == pb.Request_PENDING {
				if _, err := e.Requests.RejectRequest(admins[0], &pb.RejectRequestRequest{Name: r.GetName()}); err != nil {
					t.Fatal(err)
				}
			}
		}
		wfExec(t, e, `UPDATE virtual_clusters SET phase = 'DELETED' WHERE team_id = 'team-a' AND phase = 'PROVISIONING'`)
		if team.GetQuota().GetGpu() != "4" {
			wfApprove(t, e, "alice", wfCreate(t, e, "bob", wfChangeTeamQuota("team-a", wfQuota("4", 32000, 256*wfGiB))).GetName())
		}
	}
}

// TestWorkflowRaceFiftyApprovals: fifty concurrent approvals of one request
// make exactly one decision.
func TestWorkflowRaceFiftyApprovals(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	req := wfCreate(t, e, "bob", wfGPUVC("team-a", "fifty", "1"))
	ctxs := []context.Context{e.As(t, "alice"), e.As(t, "frank")}
	users := []string{"alice", "frank"}
	var mu sync.Mutex
	var winner *pb.Request
	winnerUser := ""
	errs := wfRace(50, func(i int) error {
		out, err := e.Requests.ApproveRequest(ctxs[i%2], &pb.ApproveRequestRequest{Name: req.GetName(), Reason: fmt.Sprint("approval ", i)})
		if err == nil {
			mu.Lock()
			winner, winnerUser = out, users[i%2]
			mu.Unlock()
		}
		return err
	})
	ok, refused := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case status.Code(err) == codes.FailedPrecondition && wfReasonOf(err) == "INVALID_STATE_TRANSITION":
			refused++
		default:
			t.Errorf("approval %d: %v", i, err)
		}
	}
	if ok != 1 || refused != 49 {
		t.Fatalf("%d succeeded and %d were refused, want 1 and 49", ok, refused)
	}

	got := wfGetRequest(t, e, req.GetName())
	if got.GetState() != pb.Request_APPROVED || got.GetDecider() != wfSubject(winnerUser) || got.GetEtag() != winner.GetEtag() ||
		got.GetDecisionReason() != winner.GetDecisionReason() {
		t.Errorf("stored request %v/%s/%q, the winner saw %v/%s/%q", got.GetState(), got.GetDecider(), got.GetDecisionReason(),
			winner.GetState(), winner.GetDecider(), winner.GetDecisionReason())
	}
	// One state change: version 1 at creation, 2 after the approval.
	if n := wfCount(t, e, `SELECT version FROM requests WHERE id = $1`, wfID(req.GetName())); n != 2 {
		t.Errorf("request version %d, want 2 (one change)", n)
	}
	if n := wfCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'ApproveRequest' AND resource = $1`, req.GetName()); n != 1 {
		t.Errorf("%d ApproveRequest audit events, want 1", n)
	}
	if got := wfAuditActions(t, e, req.GetName()); len(got) != 2 || got[1] != "ApproveRequest" {
		t.Errorf("audit of the request: %v", got)
	}
	// Created (PENDING_APPROVAL) with the request, changed once by the approval.
	if got := wfAuditActions(t, e, "teams/team-a/virtualClusters/fifty"); len(got) != 2 || got[0] != "CreateVirtualCluster" || got[1] != "UpdateVirtualCluster" {
		t.Errorf("audit of the virtual cluster: %v, want CreateVirtualCluster then one UpdateVirtualCluster", got)
	}
	if n := wfCount(t, e, `SELECT version FROM virtual_clusters WHERE id = 'fifty'`); n != 2 {
		t.Errorf("virtual cluster version %d, want 2 (one change)", n)
	}
	if n := wfCount(t, e, `SELECT count(*) FROM reconcile_work WHERE virtual_cluster_id = 'fifty'`); n != 1 {
		t.Errorf("%d reconcile_work rows", n)
	}
}

// TestWorkflowRaceMixedDecisions: approvals, rejections and a cancellation
// of one request at the same moment: one decision, and the request and its
// virtual cluster agree with it.
func TestWorkflowRaceMixedDecisions(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice, frank, bob := e.As(t, "alice"), e.As(t, "frank"), e.As(t, "bob")
	for round := range 5 {
		req := wfCreate(t, e, "bob", wfSmallVC("team-a", fmt.Sprintf("mixed-%d", round)))
		var mu sync.Mutex
		var decided *pb.Request
		errs := wfRace(30, func(i int) error {
			var out *pb.Request
			var err error
			switch i % 3 {
			case 0:
				out, err = e.Requests.ApproveRequest(alice, &pb.ApproveRequestRequest{Name: req.GetName()})
			case 1:
				out, err = e.Requests.RejectRequest(frank, &pb.RejectRequestRequest{Name: req.GetName()})
			default:
				out, err = e.Requests.CancelRequest(bob, &pb.CancelRequestRequest{Name: req.GetName()})
			}
			if err == nil {
				mu.Lock()
				decided = out
				mu.Unlock()
			}
			return err
		})
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case status.Code(err) != codes.FailedPrecondition || wfReasonOf(err) != "INVALID_STATE_TRANSITION":
				t.Fatalf("round %d: call %d: %v", round, i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d decisions succeeded, want 1", round, ok)
		}
		got := wfGetRequest(t, e, req.GetName())
		if got.GetState() != decided.GetState() || got.GetEtag() != decided.GetEtag() {
			t.Fatalf("round %d: stored %v, winner saw %v", round, got.GetState(), decided.GetState())
		}
		wantPhase := pb.VirtualClusterStatus_REJECTED
		if got.GetState() == pb.Request_APPROVED {
			wantPhase = pb.VirtualClusterStatus_PROVISIONING
		}
		if p := wfPhase(t, e, "team-a", fmt.Sprintf("mixed-%d", round)); p != wantPhase {
			t.Errorf("round %d: request %v but virtual cluster %v", round, got.GetState(), p)
		}
		if n := wfCount(t, e, `SELECT count(*) FROM audit_events WHERE resource = $1`, req.GetName()); n != 2 {
			t.Errorf("round %d: %d audit events for the request, want 2", round, n)
		}
	}
}
