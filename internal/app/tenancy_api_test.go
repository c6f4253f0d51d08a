package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
)

// ---------------------------------------------------------------------------
// Helpers shared by the app tests (tenancy_api_test.go, authz_matrix_test.go,
// api_errors_test.go).
// ---------------------------------------------------------------------------

// apiErrorDomain is the ErrorInfo.domain every API error must carry.
const apiErrorDomain = "gpuplane.dev"

const apiGiB = int64(1) << 30

func apiMask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

// apiResult carries an RPC's two results so a test can write
// apiCall(e.Teams.GetTeam(ctx, req)).must(t).
type apiResult[T any] struct {
	v   T
	err error
}

func apiCall[T any](v T, err error) apiResult[T] { return apiResult[T]{v, err} }

// must returns the value and fails the test on error.
func (r apiResult[T]) must(t testing.TB) T {
	t.Helper()
	if r.err != nil {
		t.Fatalf("unexpected error: %v", r.err)
	}
	return r.v
}

// apiWantCode fails t unless err has gRPC code want, and returns the status.
func apiWantCode(t testing.TB, err error, want codes.Code) *status.Status {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != want {
		t.Fatalf("got %v (%q), want %v", st.Code(), st.Message(), want)
	}
	return st
}

// apiRESTStatus decodes a REST error body, which grpc-gateway renders as a
// google.rpc.Status in JSON.
func apiRESTStatus(t testing.TB, r apptest.Response) *status.Status {
	t.Helper()
	var s spb.Status
	if err := protojson.Unmarshal(r.Body, &s); err != nil {
		t.Fatalf("decode error body %s: %v", r.Body, err)
	}
	return status.FromProto(&s)
}

// apiWantHTTP fails t unless r has the status code want.
func apiWantHTTP(t testing.TB, r apptest.Response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("HTTP %d, want %d: %s", r.Status, want, r.Body)
	}
}

// apiErrorInfo returns the status' ErrorInfo and checks its domain.
func apiErrorInfo(t testing.TB, st *status.Status) *errdetails.ErrorInfo {
	t.Helper()
	var found *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			found = x
		case error:
			t.Fatalf("undecodable error detail: %v", x)
		}
	}
	if found == nil {
		t.Fatalf("%v %q has no google.rpc.ErrorInfo detail", st.Code(), st.Message())
	}
	if found.GetDomain() != apiErrorDomain {
		t.Errorf("ErrorInfo.domain = %q, want %q", found.GetDomain(), apiErrorDomain)
	}
	if found.GetReason() == "" {
		t.Errorf("ErrorInfo.reason is empty")
	}
	return found
}

// apiViolations returns field -> description of the BadRequest detail.
func apiViolations(t testing.TB, st *status.Status) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out[v.GetField()] = v.GetDescription()
			}
		}
	}
	return out
}

// apiWantInvalid checks an INVALID_ARGUMENT status: ErrorInfo with reason and
// the gpuplane domain, and a BadRequest with a violation on each field.
func apiWantInvalid(t testing.TB, st *status.Status, reason string, fields ...string) {
	t.Helper()
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("got %v (%q), want InvalidArgument", st.Code(), st.Message())
	}
	if ei := apiErrorInfo(t, st); ei.GetReason() != reason {
		t.Errorf("ErrorInfo.reason = %q, want %q", ei.GetReason(), reason)
	}
	got := apiViolations(t, st)
	if len(got) == 0 {
		t.Fatalf("%q has no google.rpc.BadRequest field violations", st.Message())
	}
	for _, f := range fields {
		if _, ok := got[f]; !ok {
			t.Errorf("no field violation on %q; got %v", f, got)
		}
	}
}

// apiDoRaw sends a REST call with an explicit Authorization header value
// ("" = none) and extra headers.
func apiDoRaw(t testing.TB, e *apptest.Env, method, path, authorization string, hdr map[string]string, body any) apptest.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.HTTPBase+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return apptest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

func apiQuota(gpu string, cpuMillis, memBytes int64) *pb.Quota {
	return &pb.Quota{Gpu: gpu, CpuMillis: cpuMillis, MemoryBytes: memBytes}
}

func apiCreateDepartment(t testing.TB, e *apptest.Env, user, id, display string, budget *pb.Quota, adminGroups ...string) *pb.Department {
	t.Helper()
	return apiCall(e.Departments.CreateDepartment(e.As(t, user), &pb.CreateDepartmentRequest{
		DepartmentId: id,
		Department:   &pb.Department{DisplayName: display, QuotaBudget: budget, AdminGroups: adminGroups},
	})).must(t)
}

func apiCreateTeam(t testing.TB, e *apptest.Env, user, id, dept string, tier pb.IsolationTier, q *pb.Quota) *pb.Team {
	t.Helper()
	return apiCall(e.Teams.CreateTeam(e.As(t, user), &pb.CreateTeamRequest{
		TeamId: id,
		Team:   &pb.Team{Department: dept, DisplayName: id, IsolationTier: tier, Quota: q},
	})).must(t)
}

func apiCreateMember(t testing.TB, e *apptest.Env, user, team, id, principal string, role pb.TeamRole) *pb.Member {
	t.Helper()
	return apiCall(e.Members.CreateMember(e.As(t, user), &pb.CreateMemberRequest{
		Parent: team, MemberId: id,
		Member: &pb.Member{Principal: &pb.Member_User{User: principal}, Role: role},
	})).must(t)
}

// apiListTeams pages through ListTeams.
func apiListTeams(t testing.TB, e *apptest.Env, user, filter string) []*pb.Team {
	t.Helper()
	var out []*pb.Team
	token := ""
	for range 100 {
		resp := apiCall(e.Teams.ListTeams(e.As(t, user), &pb.ListTeamsRequest{PageSize: 500, PageToken: token, Filter: filter})).must(t)
		out = append(out, resp.GetTeams()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
	t.Fatal("ListTeams never ended")
	return nil
}

// apiListAudit pages through ListAuditEvents.
func apiListAudit(t testing.TB, e *apptest.Env, user, filter string) []*pb.AuditEvent {
	t.Helper()
	var out []*pb.AuditEvent
	token := ""
	for range 100 {
		resp := apiCall(e.Audit.ListAuditEvents(e.As(t, user), &pb.ListAuditEventsRequest{PageSize: 500, PageToken: token, Filter: filter})).must(t)
		out = append(out, resp.GetAuditEvents()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
	t.Fatal("ListAuditEvents never ended")
	return nil
}

// apiNames returns the resource names of items.
func apiNames[T interface{ GetName() string }](items []T) []string {
	out := make([]string, len(items))
	for i, x := range items {
		out[i] = x.GetName()
	}
	return out
}

func apiAuditSeq(t testing.TB, ev *pb.AuditEvent) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimPrefix(ev.GetName(), "auditEvents/"), 10, 64)
	if err != nil {
		t.Fatalf("audit event name %q: %v", ev.GetName(), err)
	}
	return n
}

// ---------------------------------------------------------------------------
// Optimistic concurrency: stale etags.
// ---------------------------------------------------------------------------

func TestStaleEtagIsAbortedAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")

	t.Run("UpdateTeam", func(t *testing.T) {
		v1 := apiCall(e.Teams.GetTeam(alice, &pb.GetTeamRequest{Name: "teams/team-a"})).must(t)
		v2 := apiCall(e.Teams.UpdateTeam(alice, &pb.UpdateTeamRequest{
			Team:       &pb.Team{Name: "teams/team-a", DisplayName: "second", Etag: v1.GetEtag()},
			UpdateMask: apiMask("display_name"),
		})).must(t)
		if v2.GetEtag() == v1.GetEtag() {
			t.Fatalf("etag did not change on update: %q", v2.GetEtag())
		}
		eventsBefore := len(apiListAudit(t, e, "alice", ""))
		_, err := e.Teams.UpdateTeam(alice, &pb.UpdateTeamRequest{
			Team:       &pb.Team{Name: "teams/team-a", DisplayName: "lost update", Quota: apiQuota("1", 1000, apiGiB), Etag: v1.GetEtag()},
			UpdateMask: apiMask("display_name", "quota"),
		})
		st := apiWantCode(t, err, codes.Aborted)
		if ei := apiErrorInfo(t, st); ei.GetReason() != "ETAG_MISMATCH" {
			t.Errorf("reason %q, want ETAG_MISMATCH", ei.GetReason())
		}
		// Over REST the etag travels in the body (the gateway derives the
		// update mask from the body, so "etag" is in the mask too).
		r := e.Do(t, "alice", "PATCH", "/v1/teams/team-a", map[string]any{"displayName": "lost update", "etag": v1.GetEtag()})
		apiWantHTTP(t, r, http.StatusConflict)
		if ei := apiErrorInfo(t, apiRESTStatus(t, r)); ei.GetReason() != "ETAG_MISMATCH" {
			t.Errorf("REST reason %q, want ETAG_MISMATCH", ei.GetReason())
		}
		now := apiCall(e.Teams.GetTeam(alice, &pb.GetTeamRequest{Name: "teams/team-a"})).must(t)
		if !proto.Equal(now, v2) {
			t.Errorf("team changed by a refused update:\n got %v\nwant %v", now, v2)
		}
		if n := len(apiListAudit(t, e, "alice", "")); n != eventsBefore {
			t.Errorf("refused updates wrote %d audit event(s)", n-eventsBefore)
		}
		// The current etag works over REST.
		r = e.Do(t, "alice", "PATCH", "/v1/teams/team-a", map[string]any{"displayName": "third", "etag": v2.GetEtag()})
		apiWantHTTP(t, r, http.StatusOK)
		if got := r.Map(t)["displayName"]; got != "third" {
			t.Errorf("displayName after REST update = %v", got)
		}
	})

	t.Run("UpdateDepartment", func(t *testing.T) {
		v1 := apiCall(e.Departments.GetDepartment(alice, &pb.GetDepartmentRequest{Name: "departments/research"})).must(t)
		v2 := apiCall(e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/research", DisplayName: "Research 2", Etag: v1.GetEtag()},
			UpdateMask: apiMask("display_name"),
		})).must(t)
		_, err := e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/research", AdminGroups: []string{"someone-else"}, Etag: v1.GetEtag()},
			UpdateMask: apiMask("admin_groups"),
		})
		apiWantCode(t, err, codes.Aborted)
		r := e.Do(t, "alice", "PATCH", "/v1/departments/research", map[string]any{"displayName": "stale", "etag": v1.GetEtag()})
		apiWantHTTP(t, r, http.StatusConflict)
		now := apiCall(e.Departments.GetDepartment(alice, &pb.GetDepartmentRequest{Name: "departments/research"})).must(t)
		if !proto.Equal(now, v2) {
			t.Errorf("department changed by a refused update:\n got %v\nwant %v", now, v2)
		}
	})

	t.Run("DeleteMember", func(t *testing.T) {
		bob := e.As(t, "bob")
		m := apiCall(e.Members.GetMember(bob, &pb.GetMemberRequest{Name: "teams/team-a/members/carol"})).must(t)
		m2 := apiCall(e.Members.UpdateMember(bob, &pb.UpdateMemberRequest{
			Member: &pb.Member{Name: m.GetName(), Role: pb.TeamRole_VIEWER}, UpdateMask: apiMask("role"),
		})).must(t)
		_, err := e.Members.DeleteMember(bob, &pb.DeleteMemberRequest{Name: m.GetName(), Etag: m.GetEtag()})
		apiWantCode(t, err, codes.Aborted)
		r := e.Do(t, "bob", "PATCH", "/v1/teams/team-a/members/carol", map[string]any{"role": "OWNER", "etag": m.GetEtag()})
		apiWantHTTP(t, r, http.StatusConflict)
		r = e.Do(t, "bob", "DELETE", "/v1/teams/team-a/members/carol?etag="+m.GetEtag(), nil)
		apiWantHTTP(t, r, http.StatusConflict)
		now := apiCall(e.Members.GetMember(bob, &pb.GetMemberRequest{Name: m.GetName()})).must(t)
		if !proto.Equal(now, m2) {
			t.Errorf("member changed by a refused delete:\n got %v\nwant %v", now, m2)
		}
		// carol still reads her team.
		apiCall(e.Teams.GetTeam(e.As(t, "carol"), &pb.GetTeamRequest{Name: "teams/team-a"})).must(t)
		// With the current etag the delete goes through.
		r = e.Do(t, "bob", "DELETE", "/v1/teams/team-a/members/carol?etag="+m2.GetEtag(), nil)
		apiWantHTTP(t, r, http.StatusOK)
		_, err = e.Members.GetMember(bob, &pb.GetMemberRequest{Name: m.GetName()})
		apiWantCode(t, err, codes.NotFound)
	})
}

// ---------------------------------------------------------------------------
// Idempotent creates (request_id).
// ---------------------------------------------------------------------------

func apiCountAudit(t testing.TB, e *apptest.Env, filter string) int {
	t.Helper()
	return len(apiListAudit(t, e, "alice", filter))
}

func TestRequestIDReplaysCreate(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")

	t.Run("CreateTeam", func(t *testing.T) {
		req := &pb.CreateTeamRequest{TeamId: "idem-team", RequestId: "req-team-1", Team: &pb.Team{
			Department: "departments/research", DisplayName: "Idem", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("1", 1000, apiGiB),
		}}
		first := apiCall(e.Teams.CreateTeam(alice, req)).must(t)
		time.Sleep(5 * time.Millisecond) // a second write would get a different update_time
		again := apiCall(e.Teams.CreateTeam(alice, req)).must(t)
		if !proto.Equal(first, again) {
			t.Errorf("replay differs:\n first %v\n again %v", first, again)
		}
		if n := apiCountAudit(t, e, `resource = "teams/idem-team" AND action = "CreateTeam"`); n != 1 {
			t.Errorf("%d CreateTeam audit events, want 1", n)
		}
		if n := apiCountAudit(t, e, `request_id = "req-team-1"`); n != 1 {
			t.Errorf("%d audit events with the request id, want 1", n)
		}
		// Same key, different body: refused, nothing written.
		other := proto.Clone(req).(*pb.CreateTeamRequest)
		other.TeamId = "idem-team-2"
		_, err := e.Teams.CreateTeam(alice, other)
		st := apiWantCode(t, err, codes.InvalidArgument)
		if ei := apiErrorInfo(t, st); ei.GetReason() != "REQUEST_ID_REUSED" {
			t.Errorf("reason %q, want REQUEST_ID_REUSED", ei.GetReason())
		}
		_, err = e.Teams.GetTeam(alice, &pb.GetTeamRequest{Name: "teams/idem-team-2"})
		apiWantCode(t, err, codes.NotFound)
		// Over REST the replay is identical too.
		body := map[string]any{"department": "departments/research", "isolationTier": "SHARED", "quota": map[string]any{"gpu": "0.5"}}
		r1 := e.Do(t, "alice", "POST", "/v1/teams?teamId=idem-rest&requestId=req-rest-1", body)
		apiWantHTTP(t, r1, http.StatusOK)
		r2 := e.Do(t, "alice", "POST", "/v1/teams?teamId=idem-rest&requestId=req-rest-1", body)
		apiWantHTTP(t, r2, http.StatusOK)
		if !bytes.Equal(r1.Body, r2.Body) {
			t.Errorf("REST replay differs:\n%s\n%s", r1.Body, r2.Body)
		}
		body["quota"] = map[string]any{"gpu": "0.25"}
		r3 := e.Do(t, "alice", "POST", "/v1/teams?teamId=idem-rest&requestId=req-rest-1", body)
		apiWantHTTP(t, r3, http.StatusBadRequest)
		if ei := apiErrorInfo(t, apiRESTStatus(t, r3)); ei.GetReason() != "REQUEST_ID_REUSED" {
			t.Errorf("REST reason %q, want REQUEST_ID_REUSED", ei.GetReason())
		}
	})

	t.Run("CreateDepartment", func(t *testing.T) {
		req := &pb.CreateDepartmentRequest{DepartmentId: "idem-dept", RequestId: "req-dept-1", Department: &pb.Department{
			DisplayName: "Idem", QuotaBudget: apiQuota("1", 1000, apiGiB), AdminGroups: []string{"idem-admins"},
		}}
		first := apiCall(e.Departments.CreateDepartment(alice, req)).must(t)
		time.Sleep(5 * time.Millisecond)
		again := apiCall(e.Departments.CreateDepartment(alice, req)).must(t)
		if !proto.Equal(first, again) {
			t.Errorf("replay differs:\n first %v\n again %v", first, again)
		}
		if n := apiCountAudit(t, e, `resource = "departments/idem-dept"`); n != 1 {
			t.Errorf("%d audit events, want 1", n)
		}
		other := proto.Clone(req).(*pb.CreateDepartmentRequest)
		other.Department.DisplayName = "Changed"
		_, err := e.Departments.CreateDepartment(alice, other)
		st := apiWantCode(t, err, codes.InvalidArgument)
		if ei := apiErrorInfo(t, st); ei.GetReason() != "REQUEST_ID_REUSED" {
			t.Errorf("reason %q, want REQUEST_ID_REUSED", ei.GetReason())
		}
		if got := apiCall(e.Departments.GetDepartment(alice, &pb.GetDepartmentRequest{Name: "departments/idem-dept"})).must(t); !proto.Equal(got, first) {
			t.Errorf("department changed: %v", got)
		}
	})

	t.Run("CreateMember", func(t *testing.T) {
		bob := e.As(t, "bob")
		req := &pb.CreateMemberRequest{Parent: "teams/team-a", RequestId: "req-member-1", Member: &pb.Member{
			Principal: &pb.Member_User{User: "newcomer@example.org"}, Role: pb.TeamRole_VIEWER,
		}}
		first := apiCall(e.Members.CreateMember(bob, req)).must(t)
		time.Sleep(5 * time.Millisecond)
		again := apiCall(e.Members.CreateMember(bob, req)).must(t)
		if !proto.Equal(first, again) {
			t.Errorf("replay differs:\n first %v\n again %v", first, again)
		}
		if n := apiCountAudit(t, e, `resource = "`+first.GetName()+`"`); n != 1 {
			t.Errorf("%d audit events, want 1", n)
		}
		list := apiCall(e.Members.ListMembers(bob, &pb.ListMembersRequest{Parent: "teams/team-a", Filter: `user = "newcomer@example.org"`})).must(t)
		if len(list.GetMembers()) != 1 {
			t.Errorf("%d members for the principal, want 1", len(list.GetMembers()))
		}
		other := proto.Clone(req).(*pb.CreateMemberRequest)
		other.Member.Role = pb.TeamRole_OWNER
		_, err := e.Members.CreateMember(bob, other)
		st := apiWantCode(t, err, codes.InvalidArgument)
		if ei := apiErrorInfo(t, st); ei.GetReason() != "REQUEST_ID_REUSED" {
			t.Errorf("reason %q, want REQUEST_ID_REUSED", ei.GetReason())
		}
	})
}

func TestConcurrentCreateTeamWithOneRequestID(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	req := &pb.CreateTeamRequest{TeamId: "racy", RequestId: "one-key", Team: &pb.Team{
		Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("1", 1000, apiGiB),
	}}
	const n = 20
	results := make([]*pb.Team, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.Teams.CreateTeam(alice, req)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("call %d: %v", i, errs[i])
			continue
		}
		if !proto.Equal(results[i], results[0]) {
			t.Errorf("call %d returned %v, call 0 %v", i, results[i], results[0])
		}
	}
	teams := apiListTeams(t, e, "alice", "")
	if got := apiNames(teams); !slices.Equal(got, []string{"teams/racy", "teams/team-a", "teams/team-b"}) {
		t.Errorf("teams = %v", got)
	}
	if got := apiCountAudit(t, e, `resource = "teams/racy"`); got != 1 {
		t.Errorf("%d audit events for teams/racy, want 1", got)
	}
	// The department's free budget was charged once: 8 - 4 - 2 - 1 = 1.
	_, err := e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: "fits", Team: &pb.Team{
		Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("1", 0, 0),
	}})
	if err != nil {
		t.Errorf("1 GPU should still fit: %v", err)
	}
}

// ---------------------------------------------------------------------------
// Pagination.
// ---------------------------------------------------------------------------

// apiParallel runs fn(i) for i in [0, n) on a few workers.
func apiParallel(t testing.TB, n, workers int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("item %d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func TestPagination(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{}) // no seed: exactly the rows made here
	alice := e.As(t, "alice")
	apiCreateDepartment(t, e, "alice", "bulk", "Bulk", nil)
	teamID := func(i int) string { return fmt.Sprintf("t-%03d", i) }
	apiParallel(t, 120, 6, func(i int) error {
		_, err := e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: teamID(i), Team: &pb.Team{
			Department: "departments/bulk", IsolationTier: pb.IsolationTier_SHARED,
		}})
		return err
	})
	var want []string
	for i := range 120 {
		want = append(want, "teams/"+teamID(i))
	}

	t.Run("teams 50/50/20", func(t *testing.T) {
		var got []string
		var sizes []int
		token := ""
		for {
			resp := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageSize: 50, PageToken: token})).must(t)
			sizes = append(sizes, len(resp.GetTeams()))
			got = append(got, apiNames(resp.GetTeams())...)
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
			if len(sizes) > 10 {
				t.Fatal("too many pages")
			}
		}
		if !slices.Equal(sizes, []int{50, 50, 20}) {
			t.Errorf("page sizes %v, want [50 50 20]", sizes)
		}
		if !slices.Equal(got, want) {
			t.Errorf("listed %d teams, want the 120 in id order without duplicates:\n%v", len(got), got)
		}
	})

	t.Run("teams default page size 50", func(t *testing.T) {
		resp := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{})).must(t)
		if len(resp.GetTeams()) != 50 || resp.GetNextPageToken() == "" {
			t.Errorf("default page: %d teams, next token %q; want 50 and a token", len(resp.GetTeams()), resp.GetNextPageToken())
		}
		r := e.Do(t, "alice", "GET", "/v1/teams", nil)
		apiWantHTTP(t, r, http.StatusOK)
		var lr struct {
			Teams         []map[string]any `json:"teams"`
			NextPageToken string           `json:"nextPageToken"`
		}
		r.JSON(t, &lr)
		if len(lr.Teams) != 50 || lr.NextPageToken == "" {
			t.Errorf("REST default page: %d teams, token %q", len(lr.Teams), lr.NextPageToken)
		}
		r = e.Do(t, "alice", "GET", "/v1/teams?pageSize=50&pageToken="+lr.NextPageToken, nil)
		apiWantHTTP(t, r, http.StatusOK)
		r.JSON(t, &lr)
		if len(lr.Teams) != 50 || lr.Teams[0]["name"] != want[50] {
			t.Errorf("REST second page starts at %v, want %s", lr.Teams[0]["name"], want[50])
		}
	})

	t.Run("token with another filter", func(t *testing.T) {
		p1 := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageSize: 10})).must(t)
		_, err := e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageSize: 10, PageToken: p1.GetNextPageToken(), Filter: `isolation_tier = SHARED`})
		apiWantInvalid(t, status.Convert(err), "INVALID_PAGE_TOKEN", "page_token")
		// A ListTeams token is no good for ListDepartments either.
		_, err = e.Departments.ListDepartments(alice, &pb.ListDepartmentsRequest{PageToken: p1.GetNextPageToken()})
		apiWantInvalid(t, status.Convert(err), "INVALID_PAGE_TOKEN", "page_token")
		// Changing page_size between pages is allowed.
		p2 := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageSize: 7, PageToken: p1.GetNextPageToken()})).must(t)
		if got := apiNames(p2.GetTeams()); !slices.Equal(got, want[10:17]) {
			t.Errorf("page after token = %v, want %v", got, want[10:17])
		}
	})

	t.Run("inserts between pages", func(t *testing.T) {
		seen := map[string]int{}
		token := ""
		for page := 0; ; page++ {
			resp := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageSize: 50, PageToken: token})).must(t)
			for _, n := range apiNames(resp.GetTeams()) {
				seen[n]++
			}
			// Rows that sort before, inside and after the listed range.
			for _, id := range []string{fmt.Sprintf("a-new-%d", page), fmt.Sprintf("t-050-new-%d", page), fmt.Sprintf("z-new-%d", page)} {
				apiCreateTeam(t, e, "alice", id, "departments/bulk", pb.IsolationTier_SHARED, nil)
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		for n, c := range seen {
			if c > 1 {
				t.Errorf("%s listed %d times", n, c)
			}
		}
		for _, n := range want {
			if seen[n] != 1 {
				t.Errorf("pre-existing %s listed %d times", n, seen[n])
			}
		}
	})

	t.Run("members 50/50/20", func(t *testing.T) {
		apiCreateTeam(t, e, "alice", "big-team", "departments/bulk", pb.IsolationTier_SHARED, nil)
		memberID := func(i int) string { return fmt.Sprintf("m-%03d", i) }
		apiParallel(t, 120, 6, func(i int) error {
			_, err := e.Members.CreateMember(alice, &pb.CreateMemberRequest{Parent: "teams/big-team", MemberId: memberID(i),
				Member: &pb.Member{Principal: &pb.Member_User{User: memberID(i) + "@example.org"}, Role: pb.TeamRole_VIEWER}})
			return err
		})
		var wantMembers []string
		for i := range 120 {
			wantMembers = append(wantMembers, "teams/big-team/members/"+memberID(i))
		}
		var got []string
		var sizes []int
		token := ""
		for {
			resp := apiCall(e.Members.ListMembers(alice, &pb.ListMembersRequest{Parent: "teams/big-team", PageSize: 50, PageToken: token})).must(t)
			sizes = append(sizes, len(resp.GetMembers()))
			got = append(got, apiNames(resp.GetMembers())...)
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
			if len(sizes) > 10 {
				t.Fatal("too many pages")
			}
		}
		if !slices.Equal(sizes, []int{50, 50, 20}) {
			t.Errorf("page sizes %v, want [50 50 20]", sizes)
		}
		if !slices.Equal(got, wantMembers) {
			t.Errorf("listed members differ from the 120 created: %v", got)
		}
		def := apiCall(e.Members.ListMembers(alice, &pb.ListMembersRequest{Parent: "teams/big-team"})).must(t)
		if len(def.GetMembers()) != 50 || def.GetNextPageToken() == "" {
			t.Errorf("default page: %d members", len(def.GetMembers()))
		}
		// The token is bound to parent and filter.
		_, err := e.Members.ListMembers(alice, &pb.ListMembersRequest{Parent: "teams/big-team", PageToken: def.GetNextPageToken(), Filter: "role = VIEWER"})
		apiWantInvalid(t, status.Convert(err), "INVALID_PAGE_TOKEN", "page_token")
		apiCreateTeam(t, e, "alice", "other-team", "departments/bulk", pb.IsolationTier_SHARED, nil)
		_, err = e.Members.ListMembers(alice, &pb.ListMembersRequest{Parent: "teams/other-team", PageToken: def.GetNextPageToken()})
		apiWantInvalid(t, status.Convert(err), "INVALID_PAGE_TOKEN", "page_token")
		// Inserts between pages: no duplicates, nothing pre-existing skipped.
		seen := map[string]int{}
		token = ""
		for page := 0; ; page++ {
			resp := apiCall(e.Members.ListMembers(alice, &pb.ListMembersRequest{Parent: "teams/big-team", PageSize: 50, PageToken: token})).must(t)
			for _, n := range apiNames(resp.GetMembers()) {
				seen[n]++
			}
			for _, id := range []string{fmt.Sprintf("a-%d", page), fmt.Sprintf("m-060-%d", page)} {
				apiCreateMember(t, e, "alice", "teams/big-team", id, id+"@example.org", pb.TeamRole_VIEWER)
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		for _, n := range wantMembers {
			if seen[n] != 1 {
				t.Errorf("%s listed %d times", n, seen[n])
			}
		}
		for n, c := range seen {
			if c > 1 {
				t.Errorf("%s listed %d times", n, c)
			}
		}
	})

	t.Run("audit events newest first", func(t *testing.T) {
		all := apiListAudit(t, e, "alice", "")
		if len(all) < 240 {
			t.Fatalf("only %d audit events", len(all))
		}
		var seqs []int64
		token := ""
		var sizes []int
		seen := map[string]int{}
		for page := 0; ; page++ {
			resp := apiCall(e.Audit.ListAuditEvents(alice, &pb.ListAuditEventsRequest{PageSize: 50, PageToken: token})).must(t)
			sizes = append(sizes, len(resp.GetAuditEvents()))
			for _, ev := range resp.GetAuditEvents() {
				seqs = append(seqs, apiAuditSeq(t, ev))
				seen[ev.GetName()]++
			}
			// New events arrive between pages; they are newer than the
			// cursor and must neither show up later nor shift the pages.
			apiCreateMember(t, e, "alice", "teams/other-team", fmt.Sprintf("late-%d", page), fmt.Sprintf("late-%d@example.org", page), pb.TeamRole_VIEWER)
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		for i, n := range sizes[:len(sizes)-1] {
			if n != 50 {
				t.Errorf("page %d has %d events", i, n)
			}
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] >= seqs[i-1] {
				t.Fatalf("not newest first at %d: %d then %d", i, seqs[i-1], seqs[i])
			}
		}
		for _, ev := range all {
			if seen[ev.GetName()] != 1 {
				t.Errorf("%s listed %d times", ev.GetName(), seen[ev.GetName()])
			}
		}
		if len(seen) != len(all) {
			t.Errorf("paged through %d events, %d existed at the start", len(seen), len(all))
		}
		// Newest first holds for the times too: the 120 teams were created
		// concurrently, and an event must not carry a time earlier than
		// one written before it (beyond microsecond clock-read races).
		for i := 1; i < len(all); i++ {
			if d := all[i].GetTime().AsTime().Sub(all[i-1].GetTime().AsTime()); d > 5*time.Millisecond {
				t.Errorf("%s is listed after %s but is %v newer", all[i].GetName(), all[i-1].GetName(), d)
			}
		}
		def := apiCall(e.Audit.ListAuditEvents(alice, &pb.ListAuditEventsRequest{})).must(t)
		if len(def.GetAuditEvents()) != 50 {
			t.Errorf("default page has %d events, want 50", len(def.GetAuditEvents()))
		}
		_, err := e.Audit.ListAuditEvents(alice, &pb.ListAuditEventsRequest{PageToken: def.GetNextPageToken(), Filter: `action = "CreateTeam"`})
		apiWantInvalid(t, status.Convert(err), "INVALID_PAGE_TOKEN", "page_token")
	})

	t.Run("page_size above 500 is clamped", func(t *testing.T) {
		n := len(apiListTeams(t, e, "alice", ""))
		apiParallel(t, 501-n, 6, func(i int) error {
			_, err := e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: fmt.Sprintf("u-%03d", i), Team: &pb.Team{
				Department: "departments/bulk", IsolationTier: pb.IsolationTier_SHARED,
			}})
			return err
		})
		resp := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageSize: 1000})).must(t)
		if len(resp.GetTeams()) != 500 || resp.GetNextPageToken() == "" {
			t.Errorf("page_size 1000: %d teams, token %q; want 500 and a token", len(resp.GetTeams()), resp.GetNextPageToken())
		}
		rest := apiCall(e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageSize: 1000, PageToken: resp.GetNextPageToken()})).must(t)
		if len(rest.GetTeams()) != 1 || rest.GetNextPageToken() != "" {
			t.Errorf("second page: %d teams, token %q; want 1 and none", len(rest.GetTeams()), rest.GetNextPageToken())
		}
		ev := apiCall(e.Audit.ListAuditEvents(alice, &pb.ListAuditEventsRequest{PageSize: 1000})).must(t)
		if len(ev.GetAuditEvents()) != 500 || ev.GetNextPageToken() == "" {
			t.Errorf("audit page_size 1000: %d events; want 500 and a token", len(ev.GetAuditEvents()))
		}
	})
}

// ---------------------------------------------------------------------------
// Quota hierarchy on direct edits.
// ---------------------------------------------------------------------------

func TestQuotaHierarchy(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	getDept := func(name string) *pb.Department {
		return apiCall(e.Departments.GetDepartment(alice, &pb.GetDepartmentRequest{Name: name})).must(t)
	}
	getTeam := func(name string) *pb.Team {
		return apiCall(e.Teams.GetTeam(alice, &pb.GetTeamRequest{Name: name})).must(t)
	}
	// Seed: research budget 8 GPU / 128 CPU / 1Ti; team-a 4 GPU and team-b
	// 2 GPU, 32 CPU and 256Gi each. Capacity 16 GPU / 256 CPU, overcommit 1.

	t.Run("department budget below its teams", func(t *testing.T) {
		before := getDept("departments/research")
		_, err := e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/research", QuotaBudget: apiQuota("5.5", 128_000, 1024*apiGiB)},
			UpdateMask: apiMask("quota_budget"),
		})
		st := apiWantCode(t, err, codes.FailedPrecondition)
		if ei := apiErrorInfo(t, st); ei.GetReason() != "QUOTA_EXCEEDED" {
			t.Errorf("reason %q, want QUOTA_EXCEEDED", ei.GetReason())
		}
		if v := apiViolations(t, st); len(v) != 1 || v["department.quota_budget.gpu"] == "" {
			t.Errorf("violations %v, want only department.quota_budget.gpu", v)
		}
		if !strings.Contains(st.Message(), "departments/research") || !strings.Contains(st.Message(), "6 GPU") {
			t.Errorf("message %q should name the department and what its teams hold (6 GPU)", st.Message())
		}
		// REST, changing one quota field in the body: memory below the
		// teams' 512Gi.
		r := e.Do(t, "alice", "PATCH", "/v1/departments/research",
			map[string]any{"quotaBudget": map[string]any{"memoryBytes": strconv.FormatInt(511*apiGiB, 10)}})
		apiWantHTTP(t, r, http.StatusBadRequest)
		st = apiRESTStatus(t, r)
		if st.Code() != codes.FailedPrecondition || apiErrorInfo(t, st).GetReason() != "QUOTA_EXCEEDED" {
			t.Errorf("REST: %v %q", st.Code(), st.Message())
		}
		if v := apiViolations(t, st); v["department.quotaBudget.memoryBytes"] == "" {
			t.Errorf("REST violations %v", v)
		}
		if got := getDept("departments/research"); !proto.Equal(got, before) {
			t.Errorf("refused updates changed the department: %v", got)
		}
		// Exactly what the teams hold is fine; the other fields stay.
		r = e.Do(t, "alice", "PATCH", "/v1/departments/research",
			map[string]any{"quotaBudget": map[string]any{"gpu": "6", "memoryBytes": strconv.FormatInt(512*apiGiB, 10)}})
		apiWantHTTP(t, r, http.StatusOK)
		got := getDept("departments/research").GetQuotaBudget()
		if want := apiQuota("6", 128_000, 512*apiGiB); !proto.Equal(got, want) {
			t.Errorf("budget %v, want %v", got, want)
		}
		apiCall(e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/research", QuotaBudget: apiQuota("8", 128_000, 1024*apiGiB)},
			UpdateMask: apiMask("quota_budget"),
		})).must(t)
	})

	t.Run("team over department budget", func(t *testing.T) {
		_, err := e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: "too-big", Team: &pb.Team{
			Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("3", 1000, apiGiB),
		}})
		st := apiWantCode(t, err, codes.FailedPrecondition)
		ei := apiErrorInfo(t, st)
		if ei.GetReason() != "QUOTA_EXCEEDED" {
			t.Errorf("reason %q, want QUOTA_EXCEEDED", ei.GetReason())
		}
		if md := ei.GetMetadata(); md["level"] != "department" || md["name"] != "departments/research" || md["resource"] != "gpu" {
			t.Errorf("ErrorInfo metadata %v", md)
		}
		for _, want := range []string{"departments/research", "gpu", "only 2 GPU", "free"} {
			if !strings.Contains(st.Message(), want) {
				t.Errorf("message %q does not contain %q", st.Message(), want)
			}
		}
		if v := apiViolations(t, st); len(v) != 1 || v["team.quota.gpu"] == "" {
			t.Errorf("violations %v, want only team.quota.gpu", v)
		}
		_, err = e.Teams.GetTeam(alice, &pb.GetTeamRequest{Name: "teams/too-big"})
		apiWantCode(t, err, codes.NotFound)

		// Exactly full fits; then nothing more does.
		apiCreateTeam(t, e, "frank", "fills-up", "departments/research", pb.IsolationTier_SHARED, apiQuota("2", 1000, apiGiB))
		r := e.Do(t, "frank", "POST", "/v1/teams?teamId=one-more", map[string]any{
			"department": "departments/research", "isolationTier": "SHARED", "quota": map[string]any{"gpu": "0.01"},
		})
		apiWantHTTP(t, r, http.StatusBadRequest)
		if ei := apiErrorInfo(t, apiRESTStatus(t, r)); ei.GetReason() != "QUOTA_EXCEEDED" {
			t.Errorf("REST reason %q", ei.GetReason())
		}
		// Growing a team is checked too; shrinking always works.
		_, err = e.Teams.UpdateTeam(alice, &pb.UpdateTeamRequest{
			Team: &pb.Team{Name: "teams/team-a", Quota: apiQuota("4.5", 32_000, 256*apiGiB)}, UpdateMask: apiMask("quota"),
		})
		apiWantCode(t, err, codes.FailedPrecondition)
		r = e.Do(t, "frank", "PATCH", "/v1/teams/team-a", map[string]any{"quota": map[string]any{"gpu": "3"}})
		apiWantHTTP(t, r, http.StatusOK)
		if got, want := getTeam("teams/team-a").GetQuota(), apiQuota("3", 32_000, 256*apiGiB); !proto.Equal(got, want) {
			t.Errorf("team-a quota %v, want %v (only gpu was in the body)", got, want)
		}
		r = e.Do(t, "frank", "PATCH", "/v1/teams/team-a", map[string]any{"quota": map[string]any{"gpu": "4.01"}})
		apiWantHTTP(t, r, http.StatusBadRequest)
		apiCall(e.Teams.DeleteTeam(alice, &pb.DeleteTeamRequest{Name: "teams/fills-up"})).must(t)
		r = e.Do(t, "frank", "PATCH", "/v1/teams/team-a", map[string]any{"quota": map[string]any{"gpu": "4"}})
		apiWantHTTP(t, r, http.StatusOK)
	})

	t.Run("department budgets within capacity", func(t *testing.T) {
		_, err := e.Departments.CreateDepartment(alice, &pb.CreateDepartmentRequest{DepartmentId: "greedy", Department: &pb.Department{
			QuotaBudget: apiQuota("9", 0, 0),
		}})
		st := apiWantCode(t, err, codes.FailedPrecondition)
		ei := apiErrorInfo(t, st)
		if ei.GetReason() != "QUOTA_EXCEEDED" || ei.GetMetadata()["level"] != "cluster" || ei.GetMetadata()["resource"] != "gpu" {
			t.Errorf("ErrorInfo %v", ei)
		}
		if !strings.Contains(st.Message(), "only 8 GPU") {
			t.Errorf("message %q should say 8 GPU are free", st.Message())
		}
		_, err = e.Departments.CreateDepartment(alice, &pb.CreateDepartmentRequest{DepartmentId: "cpu-greedy", Department: &pb.Department{
			QuotaBudget: apiQuota("0", 129_000, 0),
		}})
		st = apiWantCode(t, err, codes.FailedPrecondition)
		if ei := apiErrorInfo(t, st); ei.GetMetadata()["resource"] != "cpu" {
			t.Errorf("ErrorInfo %v, want resource cpu", ei)
		}
		apiCreateDepartment(t, e, "alice", "second", "Second", apiQuota("8", 0, 0))
		// The cluster is now fully budgeted.
		_, err = e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/research", QuotaBudget: apiQuota("8.01", 128_000, 1024*apiGiB)},
			UpdateMask: apiMask("quota_budget"),
		})
		apiWantCode(t, err, codes.FailedPrecondition)
		_, err = e.Departments.CreateDepartment(alice, &pb.CreateDepartmentRequest{DepartmentId: "crumb", Department: &pb.Department{
			QuotaBudget: apiQuota("0.01", 0, 0),
		}})
		apiWantCode(t, err, codes.FailedPrecondition)
		// Giving back makes room.
		apiCall(e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/second", QuotaBudget: apiQuota("4", 0, 0)}, UpdateMask: apiMask("quota_budget"),
		})).must(t)
		apiCall(e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/research", QuotaBudget: apiQuota("12", 128_000, 1024*apiGiB)}, UpdateMask: apiMask("quota_budget"),
		})).must(t)
		if got := getDept("departments/research").GetQuotaBudget().GetGpu(); got != "12" {
			t.Errorf("research budget %s, want 12", got)
		}
	})

	t.Run("concurrent creates never overbook", func(t *testing.T) {
		// research: budget 12, teams hold 6; the cluster: 16, budgets 16.
		results := make([]error, 10)
		apiParallel(t, 10, 10, func(i int) error {
			_, results[i] = e.Teams.CreateTeam(e.As(t, "frank"), &pb.CreateTeamRequest{TeamId: fmt.Sprintf("race-%d", i), Team: &pb.Team{
				Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("1", 0, 0),
			}})
			return nil
		})
		ok := 0
		for _, err := range results {
			switch status.Code(err) {
			case codes.OK:
				ok++
			case codes.FailedPrecondition:
			default:
				t.Errorf("CreateTeam: %v", err)
			}
		}
		if ok != 6 {
			t.Errorf("%d of 10 one-GPU teams fit in 6 free GPUs", ok)
		}
		apiCall(e.Departments.UpdateDepartment(alice, &pb.UpdateDepartmentRequest{
			Department: &pb.Department{Name: "departments/second", QuotaBudget: apiQuota("0", 0, 0)}, UpdateMask: apiMask("quota_budget"),
		})).must(t)
		apiParallel(t, 10, 10, func(i int) error {
			_, results[i] = e.Departments.CreateDepartment(alice, &pb.CreateDepartmentRequest{DepartmentId: fmt.Sprintf("race-%d", i), Department: &pb.Department{
				QuotaBudget: apiQuota("1", 0, 0),
			}})
			return nil
		})
		ok = 0
		for _, err := range results {
			if err == nil {
				ok++
			} else if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("CreateDepartment: %v", err)
			}
		}
		if ok != 4 {
			t.Errorf("%d of 10 one-GPU departments fit in 4 free GPUs", ok)
		}
	})
}

// ---------------------------------------------------------------------------
// Audit trail.
// ---------------------------------------------------------------------------

func TestAuditTrail(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	groupsOf := func(user string) []string {
		for _, u := range devenv.DemoUsers {
			if u.Username == user {
				return u.Groups
			}
		}
		t.Fatalf("no demo user %s", user)
		return nil
	}
	type step struct {
		user, method, path string
		body               any
		action, resource   string
		before, after      bool
		dept, team         string
		check              func(t *testing.T, ev *pb.AuditEvent)
	}
	steps := []step{
		{user: "frank", method: "POST", path: "/v1/teams?teamId=audit-t",
			body:   map[string]any{"department": "departments/research", "displayName": "T1", "isolationTier": "SHARED", "quota": map[string]any{"gpu": "1"}},
			action: "CreateTeam", resource: "teams/audit-t", after: true, dept: "departments/research", team: "teams/audit-t",
			check: func(t *testing.T, ev *pb.AuditEvent) {
				if got := ev.GetAfter().GetFields()["quota"].GetStructValue().GetFields()["gpu"].GetStringValue(); got != "1" {
					t.Errorf("after.quota.gpu = %q", got)
				}
			}},
		{user: "frank", method: "PATCH", path: "/v1/teams/audit-t", body: map[string]any{"displayName": "T2"},
			action: "UpdateTeam", resource: "teams/audit-t", before: true, after: true, dept: "departments/research", team: "teams/audit-t",
			check: func(t *testing.T, ev *pb.AuditEvent) {
				// Snapshots are stored with proto names and read with JSON
				// names, like every other response.
				b := ev.GetBefore().GetFields()["displayName"].GetStringValue()
				a := ev.GetAfter().GetFields()["displayName"].GetStringValue()
				if b != "T1" || a != "T2" {
					t.Errorf("displayName before %q after %q, want T1 -> T2", b, a)
				}
				for _, snap := range []*structpb.Struct{ev.GetBefore(), ev.GetAfter()} {
					if k := snakeKey(snap.AsMap()); k != "" {
						t.Errorf("snapshot key %q is not a JSON name", k)
					}
				}
			}},
		{user: "frank", method: "POST", path: "/v1/teams/audit-t/members?memberId=m1", body: map[string]any{"user": "m1@example.org", "role": "MEMBER"},
			action: "CreateMember", resource: "teams/audit-t/members/m1", after: true, dept: "departments/research", team: "teams/audit-t"},
		{user: "frank", method: "PATCH", path: "/v1/teams/audit-t/members/m1", body: map[string]any{"role": "VIEWER"},
			action: "UpdateMember", resource: "teams/audit-t/members/m1", before: true, after: true, dept: "departments/research", team: "teams/audit-t",
			check: func(t *testing.T, ev *pb.AuditEvent) {
				b := ev.GetBefore().GetFields()["role"].GetStringValue()
				a := ev.GetAfter().GetFields()["role"].GetStringValue()
				if b != "MEMBER" || a != "VIEWER" {
					t.Errorf("role before %q after %q, want MEMBER -> VIEWER", b, a)
				}
			}},
		{user: "frank", method: "DELETE", path: "/v1/teams/audit-t/members/m1",
			action: "DeleteMember", resource: "teams/audit-t/members/m1", before: true, dept: "departments/research", team: "teams/audit-t"},
		{user: "frank", method: "DELETE", path: "/v1/teams/audit-t",
			action: "DeleteTeam", resource: "teams/audit-t", before: true, dept: "departments/research", team: "teams/audit-t"},
		{user: "alice", method: "POST", path: "/v1/departments?departmentId=audit-d", body: map[string]any{"displayName": "D1"},
			action: "CreateDepartment", resource: "departments/audit-d", after: true, dept: "departments/audit-d"},
		{user: "alice", method: "PATCH", path: "/v1/departments/audit-d", body: map[string]any{"displayName": "D2"},
			action: "UpdateDepartment", resource: "departments/audit-d", before: true, after: true, dept: "departments/audit-d"},
		{user: "alice", method: "DELETE", path: "/v1/departments/audit-d",
			action: "DeleteDepartment", resource: "departments/audit-d", before: true, dept: "departments/audit-d"},
	}
	countBefore := len(apiListAudit(t, e, "alice", ""))
	ids := make([]string, len(steps))
	for i, s := range steps {
		r := e.Do(t, s.user, s.method, s.path, s.body)
		apiWantHTTP(t, r, http.StatusOK)
		if ids[i] = r.Header.Get("X-Request-Id"); ids[i] == "" {
			t.Fatalf("%s %s: no X-Request-Id response header", s.method, s.path)
		}
	}
	all := apiListAudit(t, e, "alice", "")
	if got := len(all) - countBefore; got != len(steps) {
		t.Errorf("%d new audit events for %d mutations", got, len(steps))
	}
	for i, s := range steps {
		t.Run(s.action, func(t *testing.T) {
			var found []*pb.AuditEvent
			for _, ev := range all {
				if ev.GetCorrelationId() == ids[i] {
					found = append(found, ev)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d events with correlation id %s, want 1", len(found), ids[i])
			}
			ev := found[0]
			if ev.GetAction() != s.action || ev.GetResource() != s.resource {
				t.Errorf("action %q resource %q, want %q %q", ev.GetAction(), ev.GetResource(), s.action, s.resource)
			}
			if ev.GetActor() != oidcdev.Subject(s.user) {
				t.Errorf("actor %q, want %q", ev.GetActor(), oidcdev.Subject(s.user))
			}
			if !slices.Equal(ev.GetActorGroups(), groupsOf(s.user)) {
				t.Errorf("actor_groups %v, want %v", ev.GetActorGroups(), groupsOf(s.user))
			}
			if (ev.GetBefore() != nil) != s.before || (ev.GetAfter() != nil) != s.after {
				t.Errorf("before set %v after set %v, want %v %v", ev.GetBefore() != nil, ev.GetAfter() != nil, s.before, s.after)
			}
			if s.before && ev.GetBefore().GetFields()["name"].GetStringValue() != s.resource {
				t.Errorf("before.name = %v", ev.GetBefore().GetFields()["name"])
			}
			if s.after && ev.GetAfter().GetFields()["name"].GetStringValue() != s.resource {
				t.Errorf("after.name = %v", ev.GetAfter().GetFields()["name"])
			}
			if ev.GetDepartment() != s.dept || ev.GetTeam() != s.team {
				t.Errorf("scope %q %q, want %q %q", ev.GetDepartment(), ev.GetTeam(), s.dept, s.team)
			}
			if ev.GetTime() == nil || time.Since(ev.GetTime().AsTime()) > time.Minute {
				t.Errorf("time %v", ev.GetTime())
			}
			if s.check != nil {
				s.check(t, ev)
			}
		})
	}

	t.Run("refused mutations write nothing", func(t *testing.T) {
		n := len(apiListAudit(t, e, "alice", ""))
		apiWantHTTP(t, e.Do(t, "bob", "PATCH", "/v1/teams/team-a", map[string]any{"displayName": "mine"}), http.StatusForbidden)
		apiWantHTTP(t, e.Do(t, "dan", "DELETE", "/v1/teams/team-a/members/carol", nil), http.StatusNotFound)
		apiWantHTTP(t, e.Do(t, "alice", "POST", "/v1/teams?teamId=Bad_Id", map[string]any{"department": "departments/research"}), http.StatusBadRequest)
		apiWantHTTP(t, e.Do(t, "alice", "DELETE", "/v1/departments/research", nil), http.StatusBadRequest)
		if got := len(apiListAudit(t, e, "alice", "")); got != n {
			t.Errorf("%d audit events written by refused calls", got-n)
		}
	})

	t.Run("correlation id", func(t *testing.T) {
		// A caller-supplied x-request-id is kept and recorded.
		r := apiDoRaw(t, e, "PATCH", "/v1/teams/team-a", "Bearer "+e.Token(t, "alice"),
			map[string]string{"X-Request-Id": "client-chosen-42"}, map[string]any{"displayName": "by client id"})
		apiWantHTTP(t, r, http.StatusOK)
		if got := r.Header.Get("X-Request-Id"); got != "client-chosen-42" {
			t.Errorf("X-Request-Id %q, want the caller's", got)
		}
		latest := apiCall(e.Audit.ListAuditEvents(e.As(t, "alice"), &pb.ListAuditEventsRequest{PageSize: 1})).must(t).GetAuditEvents()[0]
		if latest.GetCorrelationId() != "client-chosen-42" || latest.GetAction() != "UpdateTeam" {
			t.Errorf("latest event %v", latest)
		}
		// One that is unsafe to log is replaced by a server id.
		r = apiDoRaw(t, e, "PATCH", "/v1/teams/team-a", "Bearer "+e.Token(t, "alice"),
			map[string]string{"X-Request-Id": "bad id\" with quotes"}, map[string]any{"displayName": "by server id"})
		apiWantHTTP(t, r, http.StatusOK)
		got := r.Header.Get("X-Request-Id")
		if got == "" || strings.ContainsAny(got, "\" ") {
			t.Errorf("X-Request-Id %q", got)
		}
		latest = apiCall(e.Audit.ListAuditEvents(e.As(t, "alice"), &pb.ListAuditEventsRequest{PageSize: 1})).must(t).GetAuditEvents()[0]
		if latest.GetCorrelationId() != got {
			t.Errorf("correlation id %q, response header %q", latest.GetCorrelationId(), got)
		}
		// gRPC returns the id as response header metadata.
		var hdr metadata.MD
		apiCall(e.Teams.UpdateTeam(e.As(t, "alice"), &pb.UpdateTeamRequest{
			Team: &pb.Team{Name: "teams/team-a", DisplayName: "over gRPC"}, UpdateMask: apiMask("display_name"),
		}, grpc.Header(&hdr))).must(t)
		latest = apiCall(e.Audit.ListAuditEvents(e.As(t, "alice"), &pb.ListAuditEventsRequest{PageSize: 1})).must(t).GetAuditEvents()[0]
		if v := hdr.Get("x-request-id"); len(v) != 1 || v[0] != latest.GetCorrelationId() {
			t.Errorf("gRPC x-request-id %v, event correlation id %q", v, latest.GetCorrelationId())
		}
	})

	t.Run("time is when the change was made", func(t *testing.T) {
		// Hold the department's row lock the way a concurrent change does;
		// the CreateTeam waits for it. Its event must not be dated back to
		// when its transaction began.
		ctx := context.Background()
		tx, err := e.App.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SELECT 1 FROM departments WHERE id = 'research' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := e.Teams.CreateTeam(e.As(t, "frank"), &pb.CreateTeamRequest{TeamId: "waited", Team: &pb.Team{
				Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED,
			}})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("CreateTeam did not wait for the department lock (err %v)", err)
		default:
		}
		var released time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&released); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		evs := apiListAudit(t, e, "alice", `resource = "teams/waited"`)
		if len(evs) != 1 {
			t.Fatalf("%d events", len(evs))
		}
		if at := evs[0].GetTime().AsTime(); at.Before(released) {
			t.Errorf("event time %v is %v before the change could be made (%v)", at, released.Sub(at), released)
		}
		apiCall(e.Teams.DeleteTeam(e.As(t, "frank"), &pb.DeleteTeamRequest{Name: "teams/waited"})).must(t)
	})

	t.Run("filters", func(t *testing.T) {
		all := apiListAudit(t, e, "alice", "")
		subset := func(keep func(*pb.AuditEvent) bool) []string {
			var out []string
			for _, ev := range all {
				if keep(ev) {
					out = append(out, ev.GetName())
				}
			}
			return out
		}
		check := func(filter string, want []string) {
			t.Helper()
			got := apiNames(apiListAudit(t, e, "alice", filter))
			if len(want) == 0 {
				t.Fatalf("filter %q: the expectation is empty, the test data is wrong", filter)
			}
			if !slices.Equal(got, want) {
				t.Errorf("filter %q:\n got %v\nwant %v", filter, got, want)
			}
		}
		check(`resource = "teams/team-a*"`, subset(func(ev *pb.AuditEvent) bool { return strings.HasPrefix(ev.GetResource(), "teams/team-a") }))
		check(`resource = "teams/team-a"`, subset(func(ev *pb.AuditEvent) bool { return ev.GetResource() == "teams/team-a" }))
		check(`actor = "user-frank"`, subset(func(ev *pb.AuditEvent) bool { return ev.GetActor() == "user-frank" }))
		check(`resource = "teams/team-a*" AND actor = "user-alice"`, subset(func(ev *pb.AuditEvent) bool {
			return strings.HasPrefix(ev.GetResource(), "teams/team-a") && ev.GetActor() == "user-alice"
		}))
		check(`team = "teams/team-b"`, subset(func(ev *pb.AuditEvent) bool { return ev.GetTeam() == "teams/team-b" }))
		check(`action = "DeleteMember"`, subset(func(ev *pb.AuditEvent) bool { return ev.GetAction() == "DeleteMember" }))
		// all is newest first; take a window in the middle.
		lo, hi := all[len(all)-3].GetTime().AsTime(), all[2].GetTime().AsTime()
		if !lo.Before(hi) {
			t.Fatalf("events are not spread in time: %v %v", lo, hi)
		}
		check(fmt.Sprintf(`time >= "%s" AND time < "%s"`, lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano)),
			subset(func(ev *pb.AuditEvent) bool {
				ts := ev.GetTime().AsTime()
				return !ts.Before(lo) && ts.Before(hi)
			}))
		check(fmt.Sprintf(`time > "%s"`, lo.Format(time.RFC3339Nano)),
			subset(func(ev *pb.AuditEvent) bool { return ev.GetTime().AsTime().After(lo) }))
		// Over REST too.
		r := e.Do(t, "alice", "GET", `/v1/auditEvents?filter=`+url.QueryEscape(`resource = "teams/team-a*"`), nil)
		apiWantHTTP(t, r, http.StatusOK)
		var lr struct {
			AuditEvents []struct{ Resource string } `json:"auditEvents"`
		}
		r.JSON(t, &lr)
		if len(lr.AuditEvents) == 0 {
			t.Error("REST filter returned nothing")
		}
		for _, ev := range lr.AuditEvents {
			if !strings.HasPrefix(ev.Resource, "teams/team-a") {
				t.Errorf("REST filter returned %s", ev.Resource)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Delete semantics and the caller's view of itself.
// ---------------------------------------------------------------------------

func TestDeleteSemantics(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")

	t.Run("department with teams", func(t *testing.T) {
		_, err := e.Departments.DeleteDepartment(alice, &pb.DeleteDepartmentRequest{Name: "departments/research"})
		st := apiWantCode(t, err, codes.FailedPrecondition)
		if ei := apiErrorInfo(t, st); ei.GetReason() != "HAS_DEPENDENTS" {
			t.Errorf("reason %q, want HAS_DEPENDENTS", ei.GetReason())
		}
		r := e.Do(t, "alice", "DELETE", "/v1/departments/research", nil)
		apiWantHTTP(t, r, http.StatusBadRequest)
		apiCall(e.Departments.GetDepartment(alice, &pb.GetDepartmentRequest{Name: "departments/research"})).must(t)
		// An empty department goes.
		d := apiCreateDepartment(t, e, "alice", "empty", "Empty", nil)
		_, err = e.Departments.DeleteDepartment(alice, &pb.DeleteDepartmentRequest{Name: d.GetName(), Etag: "1-stale"})
		apiWantCode(t, err, codes.Aborted)
		apiCall(e.Departments.DeleteDepartment(alice, &pb.DeleteDepartmentRequest{Name: d.GetName(), Etag: d.GetEtag()})).must(t)
		_, err = e.Departments.GetDepartment(alice, &pb.GetDepartmentRequest{Name: d.GetName()})
		apiWantCode(t, err, codes.NotFound)
		_, err = e.Departments.DeleteDepartment(alice, &pb.DeleteDepartmentRequest{Name: d.GetName()})
		apiWantCode(t, err, codes.NotFound)
	})

	t.Run("member", func(t *testing.T) {
		carol := e.As(t, "carol")
		apiCall(e.Teams.GetTeam(carol, &pb.GetTeamRequest{Name: "teams/team-a"})).must(t)
		apiCall(e.Members.DeleteMember(e.As(t, "bob"), &pb.DeleteMemberRequest{Name: "teams/team-a/members/carol"})).must(t)
		_, err := e.Teams.GetTeam(carol, &pb.GetTeamRequest{Name: "teams/team-a"})
		apiWantCode(t, err, codes.NotFound)
		if got := len(apiListTeams(t, e, "carol", "")); got != 0 {
			t.Errorf("carol still lists %d teams", got)
		}
		if u := apiCall(e.Identity.GetCurrentUser(carol, &pb.GetCurrentUserRequest{})).must(t); len(u.GetTeamRoles()) != 0 {
			t.Errorf("carol still has roles %v", u.GetTeamRoles())
		}
		list := apiCall(e.Members.ListMembers(e.As(t, "bob"), &pb.ListMembersRequest{Parent: "teams/team-a"})).must(t)
		if got := apiNames(list.GetMembers()); !slices.Equal(got, []string{"teams/team-a/members/bob"}) {
			t.Errorf("team-a members %v", got)
		}
		_, err = e.Members.DeleteMember(e.As(t, "bob"), &pb.DeleteMemberRequest{Name: "teams/team-a/members/carol"})
		apiWantCode(t, err, codes.NotFound)
	})

	t.Run("team and then department", func(t *testing.T) {
		dan := e.As(t, "dan")
		apiCall(e.Teams.DeleteTeam(e.As(t, "frank"), &pb.DeleteTeamRequest{Name: "teams/team-b"})).must(t)
		_, err := e.Teams.GetTeam(dan, &pb.GetTeamRequest{Name: "teams/team-b"})
		apiWantCode(t, err, codes.NotFound)
		_, err = e.Members.GetMember(alice, &pb.GetMemberRequest{Name: "teams/team-b/members/dan"})
		apiWantCode(t, err, codes.NotFound)
		// A new team with the old name does not inherit the old members.
		apiCreateTeam(t, e, "alice", "team-b", "departments/research", pb.IsolationTier_DEDICATED, apiQuota("1", 0, 0))
		_, err = e.Teams.GetTeam(dan, &pb.GetTeamRequest{Name: "teams/team-b"})
		apiWantCode(t, err, codes.NotFound)
		if u := apiCall(e.Identity.GetCurrentUser(dan, &pb.GetCurrentUserRequest{})).must(t); len(u.GetTeamRoles()) != 0 {
			t.Errorf("dan has roles %v", u.GetTeamRoles())
		}
		_, err = e.Departments.DeleteDepartment(alice, &pb.DeleteDepartmentRequest{Name: "departments/research"})
		apiWantCode(t, err, codes.FailedPrecondition)
		for _, n := range []string{"teams/team-a", "teams/team-b"} {
			apiCall(e.Teams.DeleteTeam(alice, &pb.DeleteTeamRequest{Name: n})).must(t)
		}
		apiCall(e.Departments.DeleteDepartment(alice, &pb.DeleteDepartmentRequest{Name: "departments/research"})).must(t)
		if u := apiCall(e.Identity.GetCurrentUser(e.As(t, "frank"), &pb.GetCurrentUserRequest{})).must(t); len(u.GetAdminOfDepartments()) != 0 {
			t.Errorf("frank still administers %v", u.GetAdminOfDepartments())
		}
		if got := apiListTeams(t, e, "alice", ""); len(got) != 0 {
			t.Errorf("teams left: %v", apiNames(got))
		}
		_, err = e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: "orphan", Team: &pb.Team{Department: "departments/research"}})
		apiWantCode(t, err, codes.NotFound)
	})
}

func TestGetCurrentUser(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	type binding struct {
		team string
		role pb.TeamRole
		via  []string
	}
	check := func(t *testing.T, user string, admin bool, adminOf []string, roles []binding) {
		t.Helper()
		u := apiCall(e.Identity.GetCurrentUser(e.As(t, user), &pb.GetCurrentUserRequest{})).must(t)
		p := devenv.Principal(user)
		if u.GetSubject() != p.Subject || u.GetUsername() != p.Username || u.GetEmail() != p.Email {
			t.Errorf("%s: subject %q username %q email %q", user, u.GetSubject(), u.GetUsername(), u.GetEmail())
		}
		if !slices.Equal(u.GetGroups(), p.Groups) {
			t.Errorf("%s: groups %v, want %v", user, u.GetGroups(), p.Groups)
		}
		if u.GetPlatformAdmin() != admin {
			t.Errorf("%s: platform_admin %v", user, u.GetPlatformAdmin())
		}
		if !slices.Equal(u.GetAdminOfDepartments(), adminOf) {
			t.Errorf("%s: admin_of_departments %v, want %v", user, u.GetAdminOfDepartments(), adminOf)
		}
		var got []binding
		for _, b := range u.GetTeamRoles() {
			got = append(got, binding{b.GetTeam(), b.GetRole(), b.GetViaMembers()})
		}
		sort.Slice(got, func(i, j int) bool { return got[i].team < got[j].team })
		if fmt.Sprint(got) != fmt.Sprint(roles) {
			t.Errorf("%s: team_roles %v, want %v", user, got, roles)
		}
	}
	owner, member, viewer := pb.TeamRole_OWNER, pb.TeamRole_MEMBER, pb.TeamRole_VIEWER
	t.Run("demo users", func(t *testing.T) {
		check(t, "alice", true, nil, nil)
		check(t, "frank", false, []string{"departments/research"}, nil)
		check(t, "bob", false, nil, []binding{{"teams/team-a", owner, []string{"teams/team-a/members/bob"}}})
		check(t, "carol", false, nil, []binding{{"teams/team-a", member, []string{"teams/team-a/members/carol"}}})
		check(t, "dan", false, nil, []binding{{"teams/team-b", owner, []string{"teams/team-b/members/dan"}}})
		check(t, "erin", false, nil, []binding{{"teams/team-b", member, []string{"teams/team-b/members/erin"}}})
	})
	t.Run("group bindings", func(t *testing.T) {
		// carol and erin are both in ml-engineers.
		apiCall(e.Members.CreateMember(e.As(t, "dan"), &pb.CreateMemberRequest{Parent: "teams/team-b", MemberId: "ml",
			Member: &pb.Member{Principal: &pb.Member_Group{Group: "ml-engineers"}, Role: viewer}})).must(t)
		check(t, "carol", false, nil, []binding{
			{"teams/team-a", member, []string{"teams/team-a/members/carol"}},
			{"teams/team-b", viewer, []string{"teams/team-b/members/ml"}},
		})
		// The strongest role wins; every granting entry is listed.
		check(t, "erin", false, nil, []binding{{"teams/team-b", member, []string{"teams/team-b/members/erin", "teams/team-b/members/ml"}}})
		apiCall(e.Teams.GetTeam(e.As(t, "carol"), &pb.GetTeamRequest{Name: "teams/team-b"})).must(t)
		_, err := e.Members.CreateMember(e.As(t, "carol"), &pb.CreateMemberRequest{Parent: "teams/team-b",
			Member: &pb.Member{Principal: &pb.Member_User{User: "x@example.org"}, Role: viewer}})
		apiWantCode(t, err, codes.PermissionDenied)
		// A group can make someone an owner.
		apiCall(e.Members.CreateMember(e.As(t, "alice"), &pb.CreateMemberRequest{Parent: "teams/team-a", MemberId: "admins",
			Member: &pb.Member{Principal: &pb.Member_Group{Group: "research-admins"}, Role: owner}})).must(t)
		check(t, "frank", false, []string{"departments/research"}, []binding{{"teams/team-a", owner, []string{"teams/team-a/members/admins"}}})
	})
	t.Run("REST", func(t *testing.T) {
		r := e.Do(t, "bob", "GET", "/v1/users/me", nil)
		apiWantHTTP(t, r, http.StatusOK)
		var u struct {
			Subject   string
			Username  string
			TeamRoles []struct {
				Team string
				Role string
			}
		}
		r.JSON(t, &u)
		if u.Subject != "user-bob" || u.Username != "bob@example.com" || len(u.TeamRoles) != 1 ||
			u.TeamRoles[0].Team != "teams/team-a" || u.TeamRoles[0].Role != "OWNER" {
			t.Errorf("bob over REST: %s", r.Body)
		}
	})
}

// snakeKey returns a key of v (at any depth) that is a proto name rather
// than a JSON name, or "".
func snakeKey(v any) string {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.Contains(k, "_") {
				return k
			}
			if s := snakeKey(e); s != "" {
				return s
			}
		}
	case []any:
		for _, e := range x {
			if s := snakeKey(e); s != "" {
				return s
			}
		}
	}
	return ""
}
