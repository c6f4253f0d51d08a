package app_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
)

// TestValidation: every kind of bad input is INVALID_ARGUMENT with an
// ErrorInfo (domain gpuplane.dev) and a BadRequest violation naming the
// field, and changes nothing.
func TestValidation(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	long := strings.Repeat("a", 64)

	team := func(id string, q *pb.Quota, tier pb.IsolationTier) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: id, Team: &pb.Team{
				Department: "departments/research", IsolationTier: tier, Quota: q,
			}})
			return err
		}
	}
	shared := pb.IsolationTier_SHARED
	gpu := func(g string) *pb.Quota { return apiQuota(g, 0, 0) }
	dept := func(id string, q *pb.Quota) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Departments.CreateDepartment(ctx, &pb.CreateDepartmentRequest{DepartmentId: id, Department: &pb.Department{QuotaBudget: q}})
			return err
		}
	}
	member := func(parent, id string, m *pb.Member) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Members.CreateMember(ctx, &pb.CreateMemberRequest{Parent: parent, MemberId: id, Member: m})
			return err
		}
	}
	user := func(u string, role pb.TeamRole) *pb.Member {
		return &pb.Member{Principal: &pb.Member_User{User: u}, Role: role}
	}
	getTeam := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Teams.GetTeam(ctx, &pb.GetTeamRequest{Name: name})
			return err
		}
	}
	updateTeam := func(tm *pb.Team, paths ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Teams.UpdateTeam(ctx, &pb.UpdateTeamRequest{Team: tm, UpdateMask: apiMask(paths...)})
			return err
		}
	}
	listTeams := func(r *pb.ListTeamsRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := e.Teams.ListTeams(ctx, r); return err }
	}
	listDepts := func(r *pb.ListDepartmentsRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := e.Departments.ListDepartments(ctx, r); return err }
	}
	listMembers := func(r *pb.ListMembersRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := e.Members.ListMembers(ctx, r); return err }
	}
	listAudit := func(r *pb.ListAuditEventsRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := e.Audit.ListAuditEvents(ctx, r); return err }
	}
	const badToken = "bm90LWEtdG9rZW4"

	cases := []struct {
		name   string
		call   func(context.Context) error
		reason string // default INVALID_FIELD
		fields []string
	}{
		// Ids.
		{"department id uppercase", dept("Research2", nil), "", []string{"department_id"}},
		{"department id too long", dept(long, nil), "", []string{"department_id"}},
		{"department id empty", dept("", nil), "", []string{"department_id"}},
		{"department id underscore", dept("my_dept", nil), "", []string{"department_id"}},
		{"team id uppercase", team("Team-X", nil, shared), "", []string{"team_id"}},
		{"team id too long", team(long, nil, shared), "", []string{"team_id"}},
		{"team id empty", team("", nil, shared), "", []string{"team_id"}},
		{"team id underscore", team("team_x", nil, shared), "", []string{"team_id"}},
		{"team id leading dash", team("-team", nil, shared), "", []string{"team_id"}},
		{"member id uppercase", member("teams/team-a", "Zed", user("zed@example.org", pb.TeamRole_VIEWER)), "", []string{"member_id"}},
		{"member id underscore", member("teams/team-a", "z_ed", user("zed@example.org", pb.TeamRole_VIEWER)), "", []string{"member_id"}},
		{"member id too long", member("teams/team-a", long, user("zed@example.org", pb.TeamRole_VIEWER)), "", []string{"member_id"}},
		// Names.
		{"department name uppercase", func(ctx context.Context) error {
			_, err := e.Departments.GetDepartment(ctx, &pb.GetDepartmentRequest{Name: "departments/Research"})
			return err
		}, "", []string{"name"}},
		{"department name without collection", func(ctx context.Context) error {
			_, err := e.Departments.GetDepartment(ctx, &pb.GetDepartmentRequest{Name: "research"})
			return err
		}, "", []string{"name"}},
		{"department name empty", func(ctx context.Context) error {
			_, err := e.Departments.DeleteDepartment(ctx, &pb.DeleteDepartmentRequest{})
			return err
		}, "", []string{"name"}},
		{"team name underscore", getTeam("teams/team_a"), "", []string{"name"}},
		{"team name empty id", getTeam("teams/"), "", []string{"name"}},
		{"team name extra segment", getTeam("teams/team-a/x"), "", []string{"name"}},
		{"team name wrong collection", getTeam("departments/research"), "", []string{"name"}},
		{"member name uppercase", func(ctx context.Context) error {
			_, err := e.Members.GetMember(ctx, &pb.GetMemberRequest{Name: "teams/team-a/members/Bob"})
			return err
		}, "", []string{"name"}},
		{"member name too short", func(ctx context.Context) error {
			_, err := e.Members.DeleteMember(ctx, &pb.DeleteMemberRequest{Name: "teams/team-a"})
			return err
		}, "", []string{"name"}},
		{"member parent", listMembers(&pb.ListMembersRequest{Parent: "teams/Team-A"}), "", []string{"parent"}},
		{"member parent empty", member("", "", user("zed@example.org", pb.TeamRole_VIEWER)), "", []string{"parent"}},
		{"team department not a name", func(ctx context.Context) error {
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: "x", Team: &pb.Team{Department: "research"}})
			return err
		}, "", []string{"team.department"}},
		{"update team name", updateTeam(&pb.Team{Name: "teams/TEAM"}, "display_name"), "", []string{"team.name"}},
		{"update department name", func(ctx context.Context) error {
			_, err := e.Departments.UpdateDepartment(ctx, &pb.UpdateDepartmentRequest{Department: &pb.Department{Name: "departments/x_y"}})
			return err
		}, "", []string{"department.name"}},
		// Quantities.
		{"negative cpu", team("q1", apiQuota("1", -1, 0), shared), "", []string{"team.quota.cpu_millis"}},
		{"negative memory", team("q2", apiQuota("1", 0, -5), shared), "", []string{"team.quota.memory_bytes"}},
		{"huge cpu", team("q3", apiQuota("1", 1_000_000_001, 0), shared), "", []string{"team.quota.cpu_millis"}},
		{"huge memory", team("q4", apiQuota("1", 0, 1<<61), shared), "", []string{"team.quota.memory_bytes"}},
		{"gpu three decimals", team("q5", gpu("0.555"), shared), "", []string{"team.quota.gpu"}},
		{"gpu negative", team("q6", gpu("-1"), shared), "", []string{"team.quota.gpu"}},
		{"gpu NaN", team("q7", gpu("NaN"), shared), "", []string{"team.quota.gpu"}},
		{"gpu Inf", team("q7b", gpu("Inf"), shared), "", []string{"team.quota.gpu"}},
		{"gpu exponent", team("q8", gpu("1e3"), shared), "", []string{"team.quota.gpu"}},
		{"gpu huge", team("q9", gpu("100001"), shared), "", []string{"team.quota.gpu"}},
		{"gpu overflow", team("q10", gpu("99999999999999999999999"), shared), "", []string{"team.quota.gpu"}},
		{"gpu hex", team("q11", gpu("0x10"), shared), "", []string{"team.quota.gpu"}},
		{"gpu leading dot", team("q12", gpu(".5"), shared), "", []string{"team.quota.gpu"}},
		{"gpu spaces", team("q13", gpu(" 1"), shared), "", []string{"team.quota.gpu"}},
		{"several quota fields at once", team("q14", apiQuota("x", -1, -1), shared), "", []string{"team.quota.gpu", "team.quota.cpu_millis", "team.quota.memory_bytes"}},
		{"department budget gpu", dept("budget-x", gpu("abc")), "", []string{"department.quota_budget.gpu"}},
		{"department budget cpu", func(ctx context.Context) error {
			_, err := e.Departments.UpdateDepartment(ctx, &pb.UpdateDepartmentRequest{
				Department: &pb.Department{Name: "departments/research", QuotaBudget: apiQuota("8", -1, 0)}, UpdateMask: apiMask("quota_budget"),
			})
			return err
		}, "", []string{"department.quota_budget.cpu_millis"}},
		{"update team gpu", updateTeam(&pb.Team{Name: "teams/team-a", Quota: gpu("0.555")}, "quota"), "", []string{"team.quota.gpu"}},
		{"fractional gpu on new DEDICATED team", team("ded", gpu("0.5"), pb.IsolationTier_DEDICATED), "", []string{"team.quota.gpu"}},
		{"fractional gpu on DEDICATED team-b", updateTeam(&pb.Team{Name: "teams/team-b", Quota: apiQuota("1.5", 32_000, 256*apiGiB)}, "quota"), "", []string{"team.quota.gpu"}},
		{"fractional gpu on DEDICATED team-b, one field", updateTeam(&pb.Team{Name: "teams/team-b", Quota: gpu("1.25")}, "quota.gpu"), "", []string{"team.quota.gpu"}},
		{"team-a to DEDICATED with fractional gpu", updateTeam(&pb.Team{Name: "teams/team-a", IsolationTier: pb.IsolationTier_DEDICATED, Quota: apiQuota("3.5", 32_000, 256*apiGiB)}, "isolation_tier", "quota"), "", []string{"team.quota.gpu"}},
		{"bad isolation tier", team("tier", nil, pb.IsolationTier(7)), "", []string{"team.isolation_tier"}},
		{"display name too long", func(ctx context.Context) error {
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: "long-name", Team: &pb.Team{
				Department: "departments/research", DisplayName: strings.Repeat("x", 257),
			}})
			return err
		}, "", []string{"team.display_name"}},
		{"empty admin group", func(ctx context.Context) error {
			_, err := e.Departments.CreateDepartment(ctx, &pb.CreateDepartmentRequest{DepartmentId: "groups", Department: &pb.Department{AdminGroups: []string{"ok", " "}}})
			return err
		}, "", []string{"department.admin_groups"}},
		{"request id too long", func(ctx context.Context) error {
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: "rid", RequestId: strings.Repeat("r", 129), Team: &pb.Team{Department: "departments/research"}})
			return err
		}, "", []string{"request_id"}},
		// Text PostgreSQL cannot store is a field error, not INTERNAL.
		{"NUL in display name", func(ctx context.Context) error {
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: "nul", Team: &pb.Team{Department: "departments/research", DisplayName: "a\x00b"}})
			return err
		}, "", []string{"team.display_name"}},
		{"NUL in updated display name", updateTeam(&pb.Team{Name: "teams/team-a", DisplayName: "a\x00b"}, "display_name"), "", []string{"team.display_name"}},
		{"NUL in member user", member("teams/team-a", "", user("x\x00y", pb.TeamRole_VIEWER)), "", []string{"member.user"}},
		{"NUL in admin group", func(ctx context.Context) error {
			_, err := e.Departments.CreateDepartment(ctx, &pb.CreateDepartmentRequest{DepartmentId: "nul", Department: &pb.Department{AdminGroups: []string{"g\x00"}}})
			return err
		}, "", []string{"department.admin_groups[0]"}},
		{"NUL in request id", func(ctx context.Context) error {
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: "nul", RequestId: "r\x00", Team: &pb.Team{Department: "departments/research"}})
			return err
		}, "", []string{"request_id"}},
		// Missing bodies.
		{"create team without team", func(ctx context.Context) error {
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: "x"})
			return err
		}, "", []string{"team"}},
		{"create department without department", func(ctx context.Context) error {
			_, err := e.Departments.CreateDepartment(ctx, &pb.CreateDepartmentRequest{DepartmentId: "x"})
			return err
		}, "", []string{"department"}},
		{"update team without team", func(ctx context.Context) error {
			_, err := e.Teams.UpdateTeam(ctx, &pb.UpdateTeamRequest{})
			return err
		}, "", []string{"team"}},
		{"create member without member", member("teams/team-a", "", nil), "", []string{"member"}},
		// Update masks.
		{"unknown team mask path", updateTeam(&pb.Team{Name: "teams/team-a"}, "owner"), "", []string{"update_mask"}},
		{"team department is not updatable", updateTeam(&pb.Team{Name: "teams/team-a", Department: "departments/ops"}, "department"), "", []string{"team.department"}},
		{"unknown quota sub-field", updateTeam(&pb.Team{Name: "teams/team-a"}, "quota.tpu"), "", []string{"update_mask"}},
		{"unknown department mask path", func(ctx context.Context) error {
			_, err := e.Departments.UpdateDepartment(ctx, &pb.UpdateDepartmentRequest{Department: &pb.Department{Name: "departments/research"}, UpdateMask: apiMask("budget")})
			return err
		}, "", []string{"update_mask"}},
		{"unknown member mask path", func(ctx context.Context) error {
			_, err := e.Members.UpdateMember(ctx, &pb.UpdateMemberRequest{Member: &pb.Member{Name: "teams/team-a/members/carol", Role: pb.TeamRole_VIEWER}, UpdateMask: apiMask("user")})
			return err
		}, "", []string{"member.user"}},
		// Paging.
		{"teams page_size -1", listTeams(&pb.ListTeamsRequest{PageSize: -1}), "", []string{"page_size"}},
		{"departments page_size -1", listDepts(&pb.ListDepartmentsRequest{PageSize: -1}), "", []string{"page_size"}},
		{"members page_size -1", listMembers(&pb.ListMembersRequest{Parent: "teams/team-a", PageSize: -1}), "", []string{"page_size"}},
		{"audit page_size -1", listAudit(&pb.ListAuditEventsRequest{PageSize: -1}), "", []string{"page_size"}},
		{"teams page_token", listTeams(&pb.ListTeamsRequest{PageToken: badToken}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		{"teams page_token not base64", listTeams(&pb.ListTeamsRequest{PageToken: "%%%"}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		{"departments page_token", listDepts(&pb.ListDepartmentsRequest{PageToken: badToken}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		{"members page_token", listMembers(&pb.ListMembersRequest{Parent: "teams/team-a", PageToken: badToken}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		{"audit page_token", listAudit(&pb.ListAuditEventsRequest{PageToken: badToken}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		// Tokens are not signed: a well-formed token whose cursor is no id.
		{"teams forged page_token", listTeams(&pb.ListTeamsRequest{PageToken: forgedToken("teams|", "a\x00")}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		{"departments forged page_token", listDepts(&pb.ListDepartmentsRequest{PageToken: forgedToken("departments|", "a\x00")}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		{"members forged page_token", listMembers(&pb.ListMembersRequest{Parent: "teams/team-a", PageToken: forgedToken("members|teams/team-a|", "a\x00")}), "INVALID_PAGE_TOKEN", []string{"page_token"}},
		// Filters.
		{"teams filter unknown field", listTeams(&pb.ListTeamsRequest{Filter: `owner = "bob"`}), "INVALID_FILTER", []string{"filter"}},
		{"teams filter bad enum", listTeams(&pb.ListTeamsRequest{Filter: `isolation_tier = GOLD`}), "INVALID_FILTER", []string{"filter"}},
		{"teams filter OR", listTeams(&pb.ListTeamsRequest{Filter: `isolation_tier = SHARED OR isolation_tier = DEDICATED`}), "INVALID_FILTER", []string{"filter"}},
		{"teams filter department form", listTeams(&pb.ListTeamsRequest{Filter: `department = "research"`}), "INVALID_FILTER", []string{"filter"}},
		{"departments filter unknown field", listDepts(&pb.ListDepartmentsRequest{Filter: `budget = "8"`}), "INVALID_FILTER", []string{"filter"}},
		{"members filter bad enum", listMembers(&pb.ListMembersRequest{Parent: "teams/team-a", Filter: `role = ADMIN`}), "INVALID_FILTER", []string{"filter"}},
		{"audit filter bad time", listAudit(&pb.ListAuditEventsRequest{Filter: `time >= "yesterday"`}), "INVALID_FILTER", []string{"filter"}},
		{"audit filter unknown field", listAudit(&pb.ListAuditEventsRequest{Filter: `who = "bob"`}), "INVALID_FILTER", []string{"filter"}},
		{"audit filter operator", listAudit(&pb.ListAuditEventsRequest{Filter: `actor > "bob"`}), "INVALID_FILTER", []string{"filter"}},
		{"audit filter resource uid", listAudit(&pb.ListAuditEventsRequest{Filter: `resource_uid = "teams/team-a"`}), "INVALID_FILTER", []string{"filter"}},
		// Members.
		{"member without user or group", member("teams/team-a", "", &pb.Member{Role: pb.TeamRole_VIEWER}), "", []string{"member.user"}},
		{"member with empty user", member("teams/team-a", "", user("  ", pb.TeamRole_VIEWER)), "", []string{"member.user"}},
		{"member with long group", member("teams/team-a", "", &pb.Member{Principal: &pb.Member_Group{Group: strings.Repeat("g", 257)}, Role: pb.TeamRole_VIEWER}), "", []string{"member.group"}},
		{"member role unspecified", member("teams/team-a", "", user("zed@example.org", pb.TeamRole_TEAM_ROLE_UNSPECIFIED)), "", []string{"member.role"}},
		{"member role out of range", member("teams/team-a", "", user("zed@example.org", pb.TeamRole(99))), "", []string{"member.role"}},
		{"update member role unspecified", func(ctx context.Context) error {
			_, err := e.Members.UpdateMember(ctx, &pb.UpdateMemberRequest{Member: &pb.Member{Name: "teams/team-a/members/carol"}})
			return err
		}, "", []string{"member.role"}},
	}
	before := apiCountAudit(t, e, "")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reason := c.reason
			if reason == "" {
				reason = "INVALID_FIELD"
			}
			apiWantInvalid(t, status.Convert(c.call(alice)), reason, c.fields...)
		})
	}
	t.Run("member without principal has no member_id complaint", func(t *testing.T) {
		st := status.Convert(member("teams/team-a", "", &pb.Member{Role: pb.TeamRole_VIEWER})(alice))
		if v := apiViolations(t, st); len(v) != 1 {
			t.Errorf("violations %v, want only member.user (member_id is optional)", v)
		}
	})
	t.Run("forged token with an id cursor is accepted", func(t *testing.T) {
		// Control for the forged-token cases: the envelope is right, so they
		// fail for their cursor alone.
		resp := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageToken: forgedToken("teams|", "team-a")})).must(t)
		if got := apiNames(resp.GetTeams()); len(got) != 1 || got[0] != "teams/team-b" {
			t.Errorf("teams after team-a: %v", got)
		}
	})
	t.Run("nothing was written", func(t *testing.T) {
		if n := apiCountAudit(t, e, ""); n != before {
			t.Errorf("%d audit events written by invalid requests", n-before)
		}
		if got := apiNames(apiListTeams(t, e, "alice", "")); len(got) != 2 {
			t.Errorf("teams %v", got)
		}
		tb := apiCall(e.Teams.GetTeam(alice, &pb.GetTeamRequest{Name: "teams/team-b"})).must(t)
		if !proto.Equal(tb.GetQuota(), apiQuota("2", 32_000, 256*apiGiB)) || tb.GetIsolationTier() != pb.IsolationTier_DEDICATED {
			t.Errorf("team-b changed: %v", tb)
		}
	})

	// REST callers see every field by its JSON name (errs.JSONFieldPath);
	// gRPC callers, above, by its proto name.
	t.Run("REST", func(t *testing.T) {
		for _, c := range []struct {
			name, method, path string
			body               any
			reason             string
			field              string
		}{
			{"bad name in path", "GET", "/v1/teams/Team_A", nil, "INVALID_FIELD", "name"},
			{"bad member name in path", "GET", "/v1/teams/team-a/members/Bob", nil, "INVALID_FIELD", "name"},
			{"bad parent in path", "GET", "/v1/teams/team_a/members", nil, "INVALID_FIELD", "parent"},
			{"bad team id", "POST", "/v1/teams?teamId=Bad_Id", map[string]any{"department": "departments/research"}, "INVALID_FIELD", "teamId"},
			{"bad department id", "POST", "/v1/departments?departmentId=" + long, map[string]any{}, "INVALID_FIELD", "departmentId"},
			{"NaN gpu", "POST", "/v1/teams?teamId=nan", map[string]any{"department": "departments/research", "quota": map[string]any{"gpu": "NaN"}}, "INVALID_FIELD", "team.quota.gpu"},
			{"negative cpu", "POST", "/v1/teams?teamId=neg", map[string]any{"department": "departments/research", "quota": map[string]any{"cpuMillis": "-1"}}, "INVALID_FIELD", "team.quota.cpuMillis"},
			{"fractional gpu on DEDICATED", "PATCH", "/v1/teams/team-b", map[string]any{"quota": map[string]any{"gpu": "0.5"}}, "INVALID_FIELD", "team.quota.gpu"},
			{"unknown mask path", "PATCH", "/v1/teams/team-a?updateMask=owner", map[string]any{"displayName": "x"}, "INVALID_FIELD", "updateMask"},
			{"page_size -1", "GET", "/v1/teams?pageSize=-1", nil, "INVALID_FIELD", "pageSize"},
			{"bad page token", "GET", "/v1/auditEvents?pageToken=abc", nil, "INVALID_PAGE_TOKEN", "pageToken"},
			{"unknown filter field", "GET", "/v1/teams?filter=" + url.QueryEscape(`owner = "bob"`), nil, "INVALID_FILTER", "filter"},
			{"bad filter enum", "GET", "/v1/teams?filter=" + url.QueryEscape(`isolation_tier = GOLD`), nil, "INVALID_FILTER", "filter"},
			{"member without principal", "POST", "/v1/teams/team-a/members", map[string]any{"role": "OWNER"}, "INVALID_FIELD", "member.user"},
			{"member role unspecified", "POST", "/v1/teams/team-a/members", map[string]any{"user": "z@example.org", "role": "TEAM_ROLE_UNSPECIFIED"}, "INVALID_FIELD", "member.role"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := e.Do(t, "alice", c.method, c.path, c.body)
				apiWantHTTP(t, r, http.StatusBadRequest)
				apiWantInvalid(t, apiRESTStatus(t, r), c.reason, c.field)
				if r.Header.Get("X-Request-Id") == "" {
					t.Error("no X-Request-Id on the error response")
				}
			})
		}
		// Bodies the gateway cannot decode never reach the server; they are
		// still 400 INVALID_ARGUMENT.
		for _, c := range []struct {
			name, path string
			body       any
		}{
			{"unknown role name", "/v1/teams/team-a/members", map[string]any{"user": "z@example.org", "role": "SUPERUSER"}},
			{"cpu not a number", "/v1/teams?teamId=x", map[string]any{"department": "departments/research", "quota": map[string]any{"cpuMillis": "NaN"}}},
			{"unknown body field", "/v1/teams?teamId=x", map[string]any{"department": "departments/research", "owner": "bob"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := e.Do(t, "alice", "POST", c.path, c.body)
				apiWantHTTP(t, r, http.StatusBadRequest)
				if st := apiRESTStatus(t, r); st.Code() != codes.InvalidArgument {
					t.Errorf("code %v", st.Code())
				}
			})
		}
	})
}

// forgedToken builds a page token the way internal/store encodes them (a
// versioned JSON envelope with a fingerprint of the list's scope), with an
// arbitrary cursor.
func forgedToken(scope, cursor string) string {
	sum := sha256.Sum256([]byte(scope))
	c, _ := json.Marshal(cursor)
	raw, _ := json.Marshal(map[string]any{"v": 1, "s": base64.RawURLEncoding.EncodeToString(sum[:8]), "c": json.RawMessage(c)})
	return base64.RawURLEncoding.EncodeToString(raw)
}

// TestAuthentication: every API call needs a valid token from the
// configured issuer for the configured audience.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	ctx := context.Background()
	expired, err := e.Issuer.TokenWith(ctx, "bob", oidcdev.TokenOptions{ExpiredAgo: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	otherAudience, err := e.Issuer.TokenWith(ctx, "bob", oidcdev.TokenOptions{Audience: "some-other-client"})
	if err != nil {
		t.Fatal(err)
	}
	otherIssuer, err := oidcdev.New(ctx, oidcdev.Config{Addr: "127.0.0.1:0", Users: devenv.DemoUsers})
	if err != nil {
		t.Fatal(err)
	}
	defer otherIssuer.Close()
	foreign, err := otherIssuer.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	valid := e.Token(t, "bob")
	// A valid token with its signature replaced.
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))

	cases := []struct {
		name, authorization, messageHas string
	}{
		{"missing token", "", "missing bearer token"},
		{"garbage token", "Bearer not-a-jwt", "malformed token"},
		{"empty bearer", "Bearer ", "empty"},
		{"two tokens", "Bearer a b", "malformed"},
		{"basic scheme", "Basic Ym9iOmJvYg==", "Bearer"},
		{"expired token", "Bearer " + expired, "expired"},
		{"wrong audience", "Bearer " + otherAudience, "audience"},
		{"other issuer", "Bearer " + foreign, "token"},
		{"bad signature", "Bearer " + tampered, "signature"},
	}
	for _, c := range cases {
		t.Run("REST "+c.name, func(t *testing.T) {
			for _, path := range []string{"/v1/teams", "/v1/users/me", "/v1/teams/team-a"} {
				r := apiDoRaw(t, e, "GET", path, c.authorization, nil, nil)
				apiWantHTTP(t, r, http.StatusUnauthorized)
				st := apiRESTStatus(t, r)
				if st.Code() != codes.Unauthenticated {
					t.Errorf("code %v", st.Code())
				}
				if ei := apiErrorInfo(t, st); ei.GetReason() != "UNAUTHENTICATED" {
					t.Errorf("reason %q", ei.GetReason())
				}
				if !strings.Contains(st.Message(), c.messageHas) {
					t.Errorf("message %q does not say %q", st.Message(), c.messageHas)
				}
				if len(c.authorization) > 20 && strings.Contains(string(r.Body), c.authorization[7:]) {
					t.Error("the error echoes the token")
				}
			}
			// Writes are refused the same way, and nothing is written.
			r := apiDoRaw(t, e, "POST", "/v1/departments?departmentId=sneaky", c.authorization, nil, map[string]any{})
			apiWantHTTP(t, r, http.StatusUnauthorized)
		})
		t.Run("gRPC "+c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.authorization != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.authorization)
			}
			_, err := e.Teams.ListTeams(ctx, &pb.ListTeamsRequest{})
			apiWantCode(t, err, codes.Unauthenticated)
			_, err = e.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})
			apiWantCode(t, err, codes.Unauthenticated)
		})
	}
	t.Run("nothing was created", func(t *testing.T) {
		_, err := e.Departments.GetDepartment(e.As(t, "alice"), &pb.GetDepartmentRequest{Name: "departments/sneaky"})
		apiWantCode(t, err, codes.NotFound)
	})
	t.Run("valid tokens", func(t *testing.T) {
		r := apiDoRaw(t, e, "GET", "/v1/users/me", "bearer "+valid, nil, nil) // scheme is case-insensitive
		apiWantHTTP(t, r, http.StatusOK)
		// The CLI's tokens carry the API audience too.
		r = e.Do(t, "bob", "GET", "/v1/teams", nil)
		apiWantHTTP(t, r, http.StatusOK)
	})
}

// TestPublicEndpoints: health, readiness, metrics and the API description
// need no token.
func TestPublicEndpoints(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	// One API call so the RPC metrics have a sample.
	apiWantHTTP(t, e.Do(t, "alice", "GET", "/v1/teams", nil), http.StatusOK)
	get := func(path string) apptest.Response {
		t.Helper()
		r := e.Do(t, "", "GET", path, nil)
		apiWantHTTP(t, r, http.StatusOK)
		return r
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := get(p); strings.TrimSpace(string(r.Body)) != "ok" {
			t.Errorf("%s: %q", p, r.Body)
		}
	}
	// Metrics name every team: they are on the private metrics port only.
	const secret = "tenant-secret-7x" // a team name no document mentions
	apiCreateTeam(t, e, "alice", secret, "departments/research", pb.IsolationTier_SHARED, apiQuota("1", 1000, apiGiB))
	metrics := e.Do(t, "", "GET", "/metrics", nil)
	apiWantHTTP(t, metrics, http.StatusNotFound)
	resp, err := http.Get(e.MetricsBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	private, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`gpuplane_grpc_server_handled_total{code="OK",method="/gpuplane.v1.TeamService/ListTeams"}`, "go_goroutines",
		`gpuplane_team_quota{resource="gpu",team="` + secret + `"}`} {
		if !strings.Contains(string(private), want) {
			t.Errorf("/metrics on the metrics port has no %s", want)
		}
	}
	// Nothing the public port answers without a token names a team.
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/openapi.yaml", "/openapi.json", "/", "/v1/teams", "/v1/teams/" + secret,
		"/v1/auditEvents", "/v1/teams/-/virtualClusters", "/debug/pprof/", "/metrics/"} {
		r := e.Do(t, "", "GET", p, nil)
		if strings.Contains(string(r.Body), secret) {
			t.Errorf("public GET %s (HTTP %d) names team %s", p, r.Status, secret)
		}
		if strings.HasPrefix(p, "/v1/") && r.Status != http.StatusUnauthorized {
			t.Errorf("public GET %s: HTTP %d, want 401", p, r.Status)
		}
	}

	r := get("/openapi.yaml")
	if ct := r.Header.Get("Content-Type"); !strings.Contains(ct, "yaml") {
		t.Errorf("/openapi.yaml content type %q", ct)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(r.Body, &doc); err != nil {
		t.Fatalf("/openapi.yaml is not YAML: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi: %q, want 3.1.0", doc.OpenAPI)
	}
	for path, methods := range map[string][]string{
		"/v1/teams":       {"get", "post"},
		"/v1/departments": {"get", "post"},
		"/v1/auditEvents": {"get"},
		"/v1/users/me":    {"get"},
	} {
		for _, m := range methods {
			if _, ok := doc.Paths[path][m]; !ok {
				t.Errorf("/openapi.yaml has no %s %s", m, path)
			}
		}
	}
	r = get("/openapi.json")
	var jdoc map[string]any
	if err := json.Unmarshal(r.Body, &jdoc); err != nil || jdoc["openapi"] != "3.1.0" {
		t.Errorf("/openapi.json: %v %v", err, jdoc["openapi"])
	}

	// gRPC health needs no token either.
	h, err := healthpb.NewHealthClient(e.Conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v %v", h, err)
	}
	// Unknown REST paths are 404, not an authentication prompt or a panic.
	if r := e.Do(t, "alice", "GET", "/v1/nothing-here", nil); r.Status != http.StatusNotFound {
		t.Errorf("unknown path: HTTP %d", r.Status)
	}
}
