package app_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// The authorization matrix: every RPC of the tenancy, identity and audit
// services, called by every kind of caller, on objects of its own and of
// others. The rules (internal/identity/access.go): an object the caller
// cannot read is NOT_FOUND, one it can read but not change is
// PERMISSION_DENIED.
//
// Two worlds with the same objects:
//
//	departments/research  admin group research-admins (frank)
//	  teams/team-a        SHARED;    bob OWNER, carol MEMBER, viewer-x VIEWER
//	  teams/team-b        DEDICATED; dan OWNER, erin MEMBER, viewer-x VIEWER
//	departments/ops       admin group ops-admins (nobody we know)
//	  teams/team-c        viewer-x VIEWER
//
// The first has the demo roles above; in the second no demo user but alice
// has any role, so erin there is an authenticated caller with no roles at
// all (column "nobody"). Both have the same webhook subscriptions, one per
// team, per department and platform-wide, each with a delivery in its log
// (authz_events_test.go).
var matrixCallers = []string{"alice", "frank", "bob", "carol", "dan", "erin", "nobody"}

const (
	deptA = "departments/research"
	deptB = "departments/ops"
	teamA = "teams/team-a"
	teamB = "teams/team-b"
	teamC = "teams/team-c"
	memA  = "teams/team-a/members/viewer-x"
	memB  = "teams/team-b/members/viewer-x"
	memC  = "teams/team-c/members/viewer-x"
)

type authzWorld struct {
	e *apptest.Env
	n int
}

func (w *authzWorld) uniq(prefix string) string {
	w.n++
	return fmt.Sprintf("%s-%d", prefix, w.n)
}

// newAuthzWorld builds the objects above; demoRoles selects the first world.
func newAuthzWorld(t *testing.T, demoRoles bool) *authzWorld {
	e := apptest.Start(t, apptest.Options{Seed: demoRoles, Config: func(c *app.Config) {
		c.WebhookHTTPHosts, c.WebhookAllowedCIDRs = "127.0.0.1", "127.0.0.0/8" // hookURL
	}})
	if !demoRoles {
		apiCreateDepartment(t, e, "alice", "research", "Research", apiQuota("8", 128_000, 1024*apiGiB), "other-admins")
		apiCreateTeam(t, e, "alice", "team-a", deptA, pb.IsolationTier_SHARED, apiQuota("4", 32_000, 256*apiGiB))
		apiCreateTeam(t, e, "alice", "team-b", deptA, pb.IsolationTier_DEDICATED, apiQuota("2", 32_000, 256*apiGiB))
	}
	apiCreateDepartment(t, e, "alice", "ops", "Ops", apiQuota("2", 16_000, 64*apiGiB), "ops-admins")
	apiCreateTeam(t, e, "alice", "team-c", deptB, pb.IsolationTier_SHARED, apiQuota("1", 8_000, 32*apiGiB))
	for _, team := range []string{teamA, teamB, teamC} {
		apiCreateMember(t, e, "alice", team, "viewer-x", "viewer-x@example.org", pb.TeamRole_VIEWER)
	}
	w := &authzWorld{e: e}
	w.addHooks(t)
	w.addHostCluster(t)
	return w
}

// replicaTeam creates a copy of team (same department, tier and members) for
// calls that would destroy the original.
func (w *authzWorld) replicaTeam(t *testing.T, team string) string {
	t.Helper()
	alice := w.e.As(t, "alice")
	orig := apiCall(w.e.Teams.GetTeam(alice, &pb.GetTeamRequest{Name: team})).must(t)
	cp := apiCreateTeam(t, w.e, "alice", w.uniq("copy"), orig.GetDepartment(), orig.GetIsolationTier(), nil)
	members := apiCall(w.e.Members.ListMembers(alice, &pb.ListMembersRequest{Parent: team, PageSize: 500})).must(t)
	for _, m := range members.GetMembers() {
		apiCall(w.e.Members.CreateMember(alice, &pb.CreateMemberRequest{
			Parent: cp.GetName(), MemberId: m.GetName()[strings.LastIndex(m.GetName(), "/")+1:],
			Member: &pb.Member{Principal: m.GetPrincipal(), Role: m.GetRole()},
		})).must(t)
	}
	return cp.GetName()
}

// replicaMember creates another member of the member's team.
func (w *authzWorld) replicaMember(t *testing.T, member string) string {
	t.Helper()
	team, _, _ := strings.Cut(member, "/members/")
	id := w.uniq("copy")
	return apiCreateMember(t, w.e, "alice", team, id, id+"@example.org", pb.TeamRole_VIEWER).GetName()
}

type authzRow struct {
	rpc    string
	object string // what the call targets; "" for collection-level calls
	// want has one code per matrixCallers entry: OK, NF (NOT_FOUND) or PD
	// (PERMISSION_DENIED).
	want string
	call func(t *testing.T, w *authzWorld, ctx context.Context, object string, want codes.Code) error
}

func matrixRows() []authzRow {
	getDept := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Departments.GetDepartment(ctx, &pb.GetDepartmentRequest{Name: obj})
		return err
	}
	updateDept := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Departments.UpdateDepartment(ctx, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: obj, DisplayName: "renamed by the matrix"}, UpdateMask: apiMask("display_name"),
		})
		return err
	}
	deleteDept := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, want codes.Code) error {
		// Only a department without teams can go; when the call is expected
		// to succeed it runs on an empty one. Otherwise the real department
		// is safe either way (it has teams).
		if want == codes.OK {
			obj = apiCreateDepartment(t, w.e, "alice", w.uniq("empty"), "", nil).GetName()
		}
		_, err := w.e.Departments.DeleteDepartment(ctx, &pb.DeleteDepartmentRequest{Name: obj})
		return err
	}
	getTeam := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Teams.GetTeam(ctx, &pb.GetTeamRequest{Name: obj})
		return err
	}
	createTeam := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: w.uniq("new"), Team: &pb.Team{
			Department: obj, IsolationTier: pb.IsolationTier_SHARED,
		}})
		return err
	}
	updateTeam := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Teams.UpdateTeam(ctx, &pb.UpdateTeamRequest{
			Team: &pb.Team{Name: obj, DisplayName: "renamed by the matrix"}, UpdateMask: apiMask("display_name"),
		})
		return err
	}
	deleteTeam := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Teams.DeleteTeam(ctx, &pb.DeleteTeamRequest{Name: w.replicaTeam(t, obj)})
		return err
	}
	getMember := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Members.GetMember(ctx, &pb.GetMemberRequest{Name: obj})
		return err
	}
	listMembers := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Members.ListMembers(ctx, &pb.ListMembersRequest{Parent: obj})
		return err
	}
	createMember := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Members.CreateMember(ctx, &pb.CreateMemberRequest{Parent: obj, Member: &pb.Member{
			Principal: &pb.Member_User{User: w.uniq("someone") + "@example.org"}, Role: pb.TeamRole_VIEWER,
		}})
		return err
	}
	updateMember := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Members.UpdateMember(ctx, &pb.UpdateMemberRequest{
			Member: &pb.Member{Name: obj, Role: pb.TeamRole_VIEWER}, UpdateMask: apiMask("role"),
		})
		return err
	}
	deleteMember := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.e.Members.DeleteMember(ctx, &pb.DeleteMemberRequest{Name: w.replicaMember(t, obj)})
		return err
	}
	return append([]authzRow{
		//                                                 alice frank bob carol dan erin nobody
		{"DepartmentService.GetDepartment", deptA, "OK OK OK OK OK OK NF", getDept},
		{"DepartmentService.GetDepartment", deptB, "OK NF NF NF NF NF NF", getDept},
		{"DepartmentService.ListDepartments", "", "OK OK OK OK OK OK OK", func(t *testing.T, w *authzWorld, ctx context.Context, _ string, _ codes.Code) error {
			_, err := w.e.Departments.ListDepartments(ctx, &pb.ListDepartmentsRequest{})
			return err
		}},
		{"DepartmentService.CreateDepartment", "", "OK PD PD PD PD PD PD", func(t *testing.T, w *authzWorld, ctx context.Context, _ string, _ codes.Code) error {
			_, err := w.e.Departments.CreateDepartment(ctx, &pb.CreateDepartmentRequest{DepartmentId: w.uniq("dept"), Department: &pb.Department{}})
			return err
		}},
		{"DepartmentService.UpdateDepartment", deptA, "OK PD PD PD PD PD NF", updateDept},
		{"DepartmentService.UpdateDepartment", deptB, "OK NF NF NF NF NF NF", updateDept},
		{"DepartmentService.DeleteDepartment", deptA, "OK PD PD PD PD PD NF", deleteDept},
		{"DepartmentService.DeleteDepartment", deptB, "OK NF NF NF NF NF NF", deleteDept},

		{"TeamService.GetTeam", teamA, "OK OK OK OK NF NF NF", getTeam},
		{"TeamService.GetTeam", teamB, "OK OK NF NF OK OK NF", getTeam},
		{"TeamService.GetTeam", teamC, "OK NF NF NF NF NF NF", getTeam},
		{"TeamService.ListTeams", "", "OK OK OK OK OK OK OK", func(t *testing.T, w *authzWorld, ctx context.Context, _ string, _ codes.Code) error {
			_, err := w.e.Teams.ListTeams(ctx, &pb.ListTeamsRequest{})
			return err
		}},
		{"TeamService.CreateTeam", deptA, "OK OK PD PD PD PD NF", createTeam},
		{"TeamService.CreateTeam", deptB, "OK NF NF NF NF NF NF", createTeam},
		{"TeamService.UpdateTeam", teamA, "OK OK PD PD NF NF NF", updateTeam},
		{"TeamService.UpdateTeam", teamB, "OK OK NF NF PD PD NF", updateTeam},
		{"TeamService.UpdateTeam", teamC, "OK NF NF NF NF NF NF", updateTeam},
		{"TeamService.DeleteTeam", teamA, "OK OK PD PD NF NF NF", deleteTeam},
		{"TeamService.DeleteTeam", teamB, "OK OK NF NF PD PD NF", deleteTeam},
		{"TeamService.DeleteTeam", teamC, "OK NF NF NF NF NF NF", deleteTeam},

		{"MemberService.GetMember", memA, "OK OK OK OK NF NF NF", getMember},
		{"MemberService.GetMember", memB, "OK OK NF NF OK OK NF", getMember},
		{"MemberService.GetMember", memC, "OK NF NF NF NF NF NF", getMember},
		{"MemberService.ListMembers", teamA, "OK OK OK OK NF NF NF", listMembers},
		{"MemberService.ListMembers", teamB, "OK OK NF NF OK OK NF", listMembers},
		{"MemberService.ListMembers", teamC, "OK NF NF NF NF NF NF", listMembers},
		{"MemberService.CreateMember", teamA, "OK OK OK PD NF NF NF", createMember},
		{"MemberService.CreateMember", teamB, "OK OK NF NF OK PD NF", createMember},
		{"MemberService.CreateMember", teamC, "OK NF NF NF NF NF NF", createMember},
		{"MemberService.UpdateMember", memA, "OK OK OK PD NF NF NF", updateMember},
		{"MemberService.UpdateMember", memB, "OK OK NF NF OK PD NF", updateMember},
		{"MemberService.UpdateMember", memC, "OK NF NF NF NF NF NF", updateMember},
		{"MemberService.DeleteMember", memA, "OK OK OK PD NF NF NF", deleteMember},
		{"MemberService.DeleteMember", memB, "OK OK NF NF OK PD NF", deleteMember},
		{"MemberService.DeleteMember", memC, "OK NF NF NF NF NF NF", deleteMember},

		{"IdentityService.GetCurrentUser", "", "OK OK OK OK OK OK OK", func(t *testing.T, w *authzWorld, ctx context.Context, _ string, _ codes.Code) error {
			_, err := w.e.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
			return err
		}},
		{"AuditService.ListAuditEvents", "", "OK OK OK OK OK OK OK", func(t *testing.T, w *authzWorld, ctx context.Context, _ string, _ codes.Code) error {
			_, err := w.e.Audit.ListAuditEvents(ctx, &pb.ListAuditEventsRequest{})
			return err
		}},
	}, append(eventMatrixRows(), hostClusterMatrixRows()...)...)
}

func parseMatrixCodes(t *testing.T, s string) []codes.Code {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != len(matrixCallers) {
		t.Fatalf("row %q has %d codes, want %d", s, len(f), len(matrixCallers))
	}
	out := make([]codes.Code, len(f))
	for i, c := range f {
		switch c {
		case "OK":
			out[i] = codes.OK
		case "NF":
			out[i] = codes.NotFound
		case "PD":
			out[i] = codes.PermissionDenied
		default:
			t.Fatalf("unknown code %q", c)
		}
	}
	return out
}

func TestAuthzMatrix(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t, true)
	lone := newAuthzWorld(t, false)

	// The list checks run first, before the matrix adds objects.
	t.Run("list filtering", func(t *testing.T) {
		teams := func(w *authzWorld, user string) []string { return apiNames(apiListTeams(t, w.e, user, "")) }
		depts := func(w *authzWorld, user string) []string {
			return apiNames(apiCall(w.e.Departments.ListDepartments(w.e.As(t, user), &pb.ListDepartmentsRequest{})).must(t).GetDepartments())
		}
		for _, c := range []struct {
			w            *authzWorld
			user         string
			teams, depts []string
		}{
			{w, "alice", []string{teamA, teamB, teamC}, []string{deptB, deptA}},
			{w, "frank", []string{teamA, teamB}, []string{deptA}},
			{w, "bob", []string{teamA}, []string{deptA}},
			{w, "carol", []string{teamA}, []string{deptA}},
			{w, "dan", []string{teamB}, []string{deptA}},
			{w, "erin", []string{teamB}, []string{deptA}},
			{lone, "erin", nil, nil},
			{lone, "frank", nil, nil},
		} {
			if got := teams(c.w, c.user); !slices.Equal(got, c.teams) {
				t.Errorf("%s (world with roles %v) lists teams %v, want %v", c.user, c.w == w, got, c.teams)
			}
			if got := depts(c.w, c.user); !slices.Equal(got, c.depts) {
				t.Errorf("%s (world with roles %v) lists departments %v, want %v", c.user, c.w == w, got, c.depts)
			}
		}
		// Filters narrow within what the caller may read, never beyond.
		if got := apiNames(apiListTeams(t, w.e, "erin", `department = "departments/research"`)); !slices.Equal(got, []string{teamB}) {
			t.Errorf("erin filtered by department: %v", got)
		}
		if got := apiNames(apiListTeams(t, w.e, "bob", `isolation_tier = DEDICATED`)); len(got) != 0 {
			t.Errorf("bob sees DEDICATED teams %v", got)
		}

		// Audit events: each caller sees its teams' events (department
		// admins their departments'), nothing of other teams.
		audit := func(w *authzWorld, user string) []*pb.AuditEvent { return apiListAudit(t, w.e, user, "") }
		touches := func(ev *pb.AuditEvent, team string) bool {
			return ev.GetTeam() == team || ev.GetResource() == team || strings.HasPrefix(ev.GetResource(), team+"/")
		}
		for _, c := range []struct {
			user       string
			sees, not  []string // teams
			seesDeptOf bool     // department-level events of research
		}{
			{"erin", []string{teamB}, []string{teamA, teamC}, false},
			{"dan", []string{teamB}, []string{teamA, teamC}, false},
			{"bob", []string{teamA}, []string{teamB, teamC}, false},
			{"carol", []string{teamA}, []string{teamB, teamC}, false},
			{"frank", []string{teamA, teamB}, []string{teamC}, true},
			{"alice", []string{teamA, teamB, teamC}, nil, true},
		} {
			evs := audit(w, c.user)
			for _, team := range c.sees {
				if !slices.ContainsFunc(evs, func(ev *pb.AuditEvent) bool { return touches(ev, team) }) {
					t.Errorf("%s sees no events of %s", c.user, team)
				}
			}
			for _, ev := range evs {
				for _, team := range c.not {
					if touches(ev, team) {
						t.Errorf("%s sees event %s on %s", c.user, ev.GetName(), ev.GetResource())
					}
				}
				if ev.GetDepartment() == deptB && c.user != "alice" {
					t.Errorf("%s sees event %s of %s", c.user, ev.GetName(), deptB)
				}
			}
			if got := slices.ContainsFunc(evs, func(ev *pb.AuditEvent) bool { return ev.GetResource() == deptA }); got != c.seesDeptOf {
				t.Errorf("%s sees events of %s itself: %v, want %v", c.user, deptA, got, c.seesDeptOf)
			}
			// A filter does not widen the scope.
			if c.user == "erin" {
				if got := apiListAudit(t, w.e, "erin", `resource = "teams/team-a*"`); len(got) != 0 {
					t.Errorf("erin reads %d team-a events through a filter", len(got))
				}
			}
		}
		if got := audit(lone, "erin"); len(got) != 0 {
			t.Errorf("a caller without roles sees %d audit events", len(got))
		}
		// Webhook subscriptions: each caller lists those it manages.
		for _, c := range []struct {
			w     *authzWorld
			user  string
			hooks []string
		}{
			{w, "alice", []string{hookDeptB, hookPlatform, hookDeptA, hookTeamA, hookTeamB, hookTeamC}},
			{w, "frank", []string{hookDeptA, hookTeamA, hookTeamB}},
			{w, "bob", []string{hookTeamA}},
			{w, "carol", nil},
			{w, "dan", []string{hookTeamB}},
			{w, "erin", nil},
			{lone, "erin", nil},
			{lone, "frank", nil},
		} {
			if got := hookNames(t, c.w, c.user); !slices.Equal(got, c.hooks) {
				t.Errorf("%s (world with roles %v) lists webhook subscriptions %v, want %v", c.user, c.w == w, got, c.hooks)
			}
			// The audit log does not show a subscription (its URL) to
			// anyone who may not read the subscription itself.
			var audited []string
			for _, ev := range apiListAudit(t, c.w.e, c.user, `resource = "webhookSubscriptions/*"`) {
				if !slices.Contains(audited, ev.GetResource()) {
					audited = append(audited, ev.GetResource())
				}
			}
			slices.Sort(audited)
			want := slices.Clone(c.hooks)
			slices.Sort(want)
			if !slices.Equal(audited, want) {
				t.Errorf("%s (world with roles %v) reads audit events of webhook subscriptions %v, want exactly those it manages %v",
					c.user, c.w == w, audited, want)
			}
		}

		u := apiCall(lone.e.Identity.GetCurrentUser(lone.e.As(t, "erin"), &pb.GetCurrentUserRequest{})).must(t)
		if u.GetPlatformAdmin() || len(u.GetAdminOfDepartments()) != 0 || len(u.GetTeamRoles()) != 0 {
			t.Errorf("a caller without roles: %v", u)
		}
	})

	t.Run("matrix", func(t *testing.T) {
		for _, row := range matrixRows() {
			want := parseMatrixCodes(t, row.want)
			for i, caller := range matrixCallers {
				name := row.rpc + "/" + strings.ReplaceAll(row.object, "/", "_") + "/" + caller
				if row.object == "" {
					name = row.rpc + "/" + caller
				}
				t.Run(name, func(t *testing.T) {
					world, user := w, caller
					if caller == "nobody" {
						world, user = lone, "erin"
					}
					err := row.call(t, world, world.e.As(t, user), row.object, want[i])
					if got := status.Code(err); got != want[i] {
						t.Errorf("%s as %s on %q: got %v (%v), want %v", row.rpc, caller, row.object, got, err, want[i])
					}
				})
			}
		}
	})

	t.Run("REST", func(t *testing.T) {
		for _, c := range []struct {
			user, method, path string
			body               any
			want               int
		}{
			{"carol", "GET", "/v1/teams/team-a", nil, http.StatusOK},
			{"dan", "GET", "/v1/teams/team-a", nil, http.StatusNotFound},
			{"bob", "PATCH", "/v1/teams/team-a", map[string]any{"displayName": "mine"}, http.StatusForbidden},
			{"frank", "PATCH", "/v1/teams/team-a", map[string]any{"displayName": "Team A"}, http.StatusOK},
			{"bob", "GET", "/v1/teams/team-b/members", nil, http.StatusNotFound},
			{"erin", "GET", "/v1/teams/team-a/members", nil, http.StatusNotFound},
			{"dan", "GET", "/v1/teams/team-a/members", nil, http.StatusNotFound},
			{"erin", "GET", "/v1/teams/team-b/members", nil, http.StatusOK},
			{"carol", "POST", "/v1/teams/team-a/members", map[string]any{"user": "rest-1@example.org", "role": "VIEWER"}, http.StatusForbidden},
			{"bob", "POST", "/v1/teams/team-a/members", map[string]any{"user": "rest-1@example.org", "role": "VIEWER"}, http.StatusOK},
			{"dan", "DELETE", "/v1/teams/team-a/members/carol", nil, http.StatusNotFound},
			{"carol", "DELETE", "/v1/teams/team-a/members/bob", nil, http.StatusForbidden},
			{"frank", "GET", "/v1/departments/research", nil, http.StatusOK},
			{"frank", "GET", "/v1/departments/ops", nil, http.StatusNotFound},
			{"frank", "PATCH", "/v1/departments/research", map[string]any{"displayName": "mine"}, http.StatusForbidden},
			{"frank", "DELETE", "/v1/departments/research", nil, http.StatusForbidden},
			{"bob", "POST", "/v1/departments?departmentId=rest-d", map[string]any{}, http.StatusForbidden},
			{"dan", "POST", "/v1/teams?teamId=rest-t", map[string]any{"department": "departments/research"}, http.StatusForbidden},
			{"dan", "POST", "/v1/teams?teamId=rest-t", map[string]any{"department": "departments/ops"}, http.StatusNotFound},
			{"frank", "DELETE", "/v1/teams/team-c", nil, http.StatusNotFound},
			{"erin", "GET", "/v1/users/me", nil, http.StatusOK},
			{"erin", "GET", "/v1/auditEvents", nil, http.StatusOK},
		} {
			r := w.e.Do(t, c.user, c.method, c.path, c.body)
			if r.Status != c.want {
				t.Errorf("%s %s as %s: HTTP %d, want %d: %s", c.method, c.path, c.user, r.Status, c.want, r.Body)
				continue
			}
			if c.want != http.StatusOK {
				st := apiRESTStatus(t, r)
				want := map[int]string{http.StatusNotFound: "NOT_FOUND", http.StatusForbidden: "PERMISSION_DENIED"}[c.want]
				if ei := apiErrorInfo(t, st); ei.GetReason() != want {
					t.Errorf("%s %s as %s: reason %q, want %q", c.method, c.path, c.user, ei.GetReason(), want)
				}
				// NOT_FOUND for a foreign object reads exactly like a missing one.
				if c.want == http.StatusNotFound && strings.Contains(strings.ToLower(st.Message()), "permission") {
					t.Errorf("NOT_FOUND message leaks a permission hint: %q", st.Message())
				}
			}
		}
		// A foreign team and a team that does not exist answer alike.
		foreign := apiRESTStatus(t, w.e.Do(t, "dan", "GET", "/v1/teams/team-a", nil))
		missing := apiRESTStatus(t, w.e.Do(t, "dan", "GET", "/v1/teams/team-zz", nil))
		if foreign.Code() != missing.Code() || strings.ReplaceAll(foreign.Message(), "team-a", "X") != strings.ReplaceAll(missing.Message(), "team-zz", "X") {
			t.Errorf("foreign %v %q vs missing %v %q", foreign.Code(), foreign.Message(), missing.Code(), missing.Message())
		}
		r := lone.e.Do(t, "erin", "GET", "/v1/teams/team-a", nil)
		apiWantHTTP(t, r, http.StatusNotFound)
	})
}
