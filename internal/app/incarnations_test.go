package app_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// TestVirtualClusterIDReuseKeepsOtherTeamsHistory: once team-a's virtual
// cluster is REJECTED (or DELETED) its name is free, and another team may
// take it; team-a's row stays team-a's, unchanged, with its own uid. Before
// incarnations, taking the name deleted team-a's row.
func TestVirtualClusterIDReuseKeepsOtherTeamsHistory(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	apiCreateTeam(t, e, "alice", "team-c", "departments/research", pb.IsolationTier_SHARED, apiQuota("0", 1000, apiGiB))

	rejected := wfCreate(t, e, "bob", wfSmallVC("team-a", "reused"))
	if _, err := e.Requests.RejectRequest(e.As(t, "frank"), &pb.RejectRequestRequest{Name: rejected.GetName(), Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	old := wfGetVC(t, e, "team-a", "reused")
	if old.GetStatus().GetPhase() != pb.VirtualClusterStatus_REJECTED || old.GetUid() == "" {
		t.Fatalf("team-a's virtual cluster: phase %v uid %q", old.GetStatus().GetPhase(), old.GetUid())
	}

	// team-c takes the gone name, and it is approved.
	wfApprove(t, e, "frank", wfCreate(t, e, "alice", wfSmallVC("team-c", "reused")).GetName())
	taken := wfGetVC(t, e, "team-c", "reused")
	if taken.GetUid() == "" || taken.GetUid() == old.GetUid() {
		t.Fatalf("the new incarnation's uid %q, the old one's %q", taken.GetUid(), old.GetUid())
	}
	if taken.GetStatus().GetPhase() != pb.VirtualClusterStatus_PROVISIONING {
		t.Errorf("team-c's virtual cluster is %v, want PROVISIONING", taken.GetStatus().GetPhase())
	}

	// team-a's record is still there, as it was, under team-a.
	after := wfGetVC(t, e, "team-a", "reused")
	if after.GetUid() != old.GetUid() || after.GetEtag() != old.GetEtag() || after.GetStatus().GetPhase() != pb.VirtualClusterStatus_REJECTED {
		t.Errorf("team-a's rejected virtual cluster changed: %v -> %v", old, after)
	}
	if n := wfCount(t, e, `SELECT count(*) FROM virtual_clusters WHERE id = 'reused'`); n != 2 {
		t.Errorf("%d rows named reused, want 2 (team-a's history and team-c's)", n)
	}

	// Lists show each team its own; the platform-wide list both, each once.
	list := func(user, parent string) []string {
		resp, err := e.VirtualCluster.ListVirtualClusters(e.As(t, user), &pb.ListVirtualClustersRequest{Parent: parent, PageSize: 1})
		var out []string
		for err == nil {
			out = append(out, apiNames(resp.GetVirtualClusters())...)
			if resp.GetNextPageToken() == "" {
				return out
			}
			resp, err = e.VirtualCluster.ListVirtualClusters(e.As(t, user), &pb.ListVirtualClustersRequest{Parent: parent, PageSize: 1, PageToken: resp.GetNextPageToken()})
		}
		t.Fatalf("%s lists %s: %v", user, parent, err)
		return nil
	}
	if got := list("bob", "teams/team-a"); !slices.Contains(got, "teams/team-a/virtualClusters/reused") {
		t.Errorf("team-a's list lost its rejected virtual cluster: %v", got)
	}
	all := list("alice", "teams/-")
	for _, want := range []string{"teams/team-a/virtualClusters/reused", "teams/team-c/virtualClusters/reused"} {
		if n := len(slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s != want })); n != 1 {
			t.Errorf("the platform-wide list (one per page) has %s %d times, want once: %v", want, n, all)
		}
	}

	// A live name is still taken, by any team, the one holding it included.
	for _, team := range []string{"team-a", "team-c"} {
		_, err := e.Requests.CreateRequest(e.As(t, "alice"), &pb.CreateRequestRequest{Request: wfSmallVC(team, "reused")})
		wfExpect(t, err, codes.AlreadyExists, "ALREADY_EXISTS")
	}
	// The events of each incarnation carry its uid, and filtering by it
	// lists them all.
	for _, vc := range []*pb.VirtualCluster{old, taken} {
		var byName []string
		for _, ev := range apiListAudit(t, e, "alice", `resource = "`+vc.GetName()+`"`) {
			if ev.GetResourceUid() != vc.GetUid() {
				t.Errorf("%s event %s of %s has resource_uid %q, want %q", ev.GetAction(), ev.GetName(), vc.GetName(), ev.GetResourceUid(), vc.GetUid())
			}
			byName = append(byName, ev.GetName())
		}
		var byUID []string
		for _, ev := range apiListAudit(t, e, "alice", `resource_uid = "`+vc.GetUid()+`"`) {
			byUID = append(byUID, ev.GetName())
		}
		if len(byUID) == 0 || !slices.Equal(byUID, byName) {
			t.Errorf("resource_uid = %s lists %v; resource = %s lists %v", vc.GetUid(), byUID, vc.GetName(), byName)
		}
	}
}

// TestAuditOfAReusedTeamIDStartsEmpty: a team created with the id of a
// deleted team is a new incarnation (another uid); its members read its
// events, never the deleted team's. The department's admins, whose
// department did not change, read both; the platform admin reads all.
func TestAuditOfAReusedTeamIDStartsEmpty(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	first := apiCreateTeam(t, e, "alice", "phoenix", "departments/research", pb.IsolationTier_SHARED, apiQuota("0", 1000, apiGiB))
	apiCreateMember(t, e, "alice", "teams/phoenix", "erin", "erin@example.com", pb.TeamRole_OWNER)
	// erin, a member of the first phoenix, leaves a trail.
	req := wfCreate(t, e, "erin", wfSmallVC("phoenix", "phoenix-vc"))
	if _, err := e.Requests.CancelRequest(e.As(t, "erin"), &pb.CancelRequestRequest{Name: req.GetName()}); err != nil {
		t.Fatal(err)
	}
	if n := len(apiListAudit(t, e, "erin", `team = "teams/phoenix"`)); n < 4 {
		t.Fatalf("erin reads %d events of her team, want at least 4", n)
	}
	// The team goes (its rejected virtual cluster and members with it).
	if _, err := e.Members.DeleteMember(e.As(t, "alice"), &pb.DeleteMemberRequest{Name: "teams/phoenix/members/erin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Teams.DeleteTeam(e.As(t, "alice"), &pb.DeleteTeamRequest{Name: "teams/phoenix"}); err != nil {
		t.Fatal(err)
	}
	oldEvents := apiListAudit(t, e, "alice", `team = "teams/phoenix"`)

	// A new phoenix, for dan.
	second := apiCreateTeam(t, e, "alice", "phoenix", "departments/research", pb.IsolationTier_SHARED, apiQuota("0", 1000, apiGiB))
	if second.GetUid() == "" || second.GetUid() == first.GetUid() {
		t.Fatalf("team uids: first %q, second %q", first.GetUid(), second.GetUid())
	}
	apiCreateMember(t, e, "alice", "teams/phoenix", "dan", "dan@example.com", pb.TeamRole_OWNER)

	for _, filter := range []string{`team = "teams/phoenix"`, `resource = "teams/phoenix*"`, ""} {
		for _, ev := range apiListAudit(t, e, "dan", filter) {
			if slices.ContainsFunc(oldEvents, func(o *pb.AuditEvent) bool { return o.GetName() == ev.GetName() }) {
				t.Errorf("dan (filter %q) reads %s %s %s of the deleted phoenix", filter, ev.GetName(), ev.GetAction(), ev.GetResource())
			}
		}
	}
	var dans []string
	for _, ev := range apiListAudit(t, e, "dan", `team = "teams/phoenix"`) {
		dans = append(dans, ev.GetAction())
	}
	slices.Reverse(dans)
	if want := []string{"CreateTeam", "CreateMember"}; !slices.Equal(dans, want) {
		t.Errorf("dan reads %v of the new phoenix, want %v", dans, want)
	}
	if got := apiListAudit(t, e, "dan", `resource = "teams/phoenix"`); len(got) != 1 || got[0].GetResourceUid() != second.GetUid() {
		t.Errorf("the new phoenix's own events: %v, want its CreateTeam with uid %s", got, second.GetUid())
	}
	// The department's admin and the platform admin still read the old
	// incarnation's history.
	for _, user := range []string{"frank", "alice"} {
		if got := apiListAudit(t, e, user, `team = "teams/phoenix"`); len(got) < len(oldEvents)+2 {
			t.Errorf("%s reads %d events of both phoenixes, want %d", user, len(got), len(oldEvents)+2)
		}
	}
}
