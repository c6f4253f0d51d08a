package app_test

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// TestNULAndInvalidUTF8AreRefused: a NUL byte in any free-text field, and
// invalid UTF-8 (or NUL) in a REST path or query parameter, are the
// caller's mistake: 400 INVALID_ARGUMENT naming the field (JSON names over
// REST, proto names over gRPC) before any handler runs, never a 500. Nothing
// is stored.
func TestNULAndInvalidUTF8AreRefused(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	bob := e.As(t, "bob")

	t.Run("gRPC", func(t *testing.T) {
		pending := apiCall(e.Requests.CreateRequest(bob, &pb.CreateRequestRequest{Request: wfSmallVC("team-a", "text-1")})).must(t)
		for _, c := range []struct {
			name, field string
			call        func() error
		}{
			{"justification", "request.justification", func() error {
				r := wfSmallVC("team-a", "text-2")
				r.Justification = "needs\x00GPUs"
				_, err := e.Requests.CreateRequest(bob, &pb.CreateRequestRequest{Request: r})
				return err
			}},
			{"virtual cluster display name", "request.create_virtual_cluster.spec.display_name", func() error {
				r := wfSmallVC("team-a", "text-3")
				r.GetCreateVirtualCluster().GetSpec().DisplayName = "\x00"
				_, err := e.Requests.CreateRequest(bob, &pb.CreateRequestRequest{Request: r})
				return err
			}},
			{"chart version", "request.create_virtual_cluster.spec.chart_version", func() error {
				r := wfSmallVC("team-a", "text-4")
				r.GetCreateVirtualCluster().GetSpec().ChartVersion = "0.36.1\x00"
				_, err := e.Requests.CreateRequest(bob, &pb.CreateRequestRequest{Request: r})
				return err
			}},
			{"approval reason", "reason", func() error {
				_, err := e.Requests.ApproveRequest(alice, &pb.ApproveRequestRequest{Name: pending.GetName(), Reason: "ok\x00"})
				return err
			}},
			{"rejection reason", "reason", func() error {
				_, err := e.Requests.RejectRequest(alice, &pb.RejectRequestRequest{Name: pending.GetName(), Reason: "\x00no"})
				return err
			}},
			{"team display name", "team.display_name", func() error {
				_, err := e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: "text-team", Team: &pb.Team{
					Department: "departments/research", DisplayName: "Team\x00", IsolationTier: pb.IsolationTier_SHARED}})
				return err
			}},
			{"department admin group", "department.admin_groups[1]", func() error {
				_, err := e.Departments.CreateDepartment(alice, &pb.CreateDepartmentRequest{DepartmentId: "text-dept",
					Department: &pb.Department{AdminGroups: []string{"ok", "bad\x00"}}})
				return err
			}},
			{"CEL text", "approval_policy.expression", func() error {
				_, err := e.Policies.CreateApprovalPolicy(alice, &pb.CreateApprovalPolicyRequest{ApprovalPolicyId: "text-policy",
					ApprovalPolicy: &pb.ApprovalPolicy{Expression: "request.gpu_delta < 1.0 && '\x00' == ''"}})
				return err
			}},
			{"list filter", "filter", func() error {
				_, err := e.Audit.ListAuditEvents(alice, &pb.ListAuditEventsRequest{Filter: "actor = \"\x00\""})
				return err
			}},
			{"page token", "page_token", func() error {
				_, err := e.Teams.ListTeams(alice, &pb.ListTeamsRequest{PageToken: "\x00"})
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				apiWantInvalid(t, apiWantCode(t, c.call(), codes.InvalidArgument), "INVALID_FIELD", c.field)
			})
		}
		if got := wfGetRequest(t, e, pending.GetName()).GetState(); got != pb.Request_PENDING {
			t.Errorf("refused decisions changed the request: %v", got)
		}
	})

	t.Run("REST", func(t *testing.T) {
		for _, c := range []struct {
			method, path string
			body         any
			field        string
		}{
			{"POST", "/v1/teams?teamId=text-rest", map[string]any{"department": "departments/research", "displayName": "a\x00b"}, "team.displayName"},
			{"POST", "/v1/requests", map[string]any{"team": "teams/team-a", "justification": "\x00",
				"createVirtualCluster": map[string]any{"virtualClusterId": "text-rest", "spec": map[string]any{"quota": map[string]any{"gpu": "1"}}}},
				"request.justification"},
			{"POST", "/v1/approvalPolicies?approvalPolicyId=text-rest", map[string]any{"expression": "true", "displayName": "x\x00"}, "approvalPolicy.displayName"},
			{"GET", "/v1/teams/%FF", nil, "path"},
			{"GET", "/v1/teams/team-a%00", nil, "path"},
			{"GET", "/v1/teams/team-a/members/%C3%28", nil, "path"},
			{"GET", "/v1/auditEvents?filter=%FF", nil, "filter"},
			{"GET", "/v1/auditEvents?filter=actor%20%3D%20%22%00%22", nil, "filter"},
			{"GET", "/v1/teams?pageToken=%E2%82", nil, "pageToken"},
			{"GET", "/v1/teams?%FF=1", nil, "query"},
			{"GET", "/v1/teams?filter=%ZZ", nil, "query"},
		} {
			t.Run(c.method+" "+c.path, func(t *testing.T) {
				r := e.Do(t, "alice", c.method, c.path, c.body)
				apiWantHTTP(t, r, http.StatusBadRequest)
				apiWantInvalid(t, apiRESTStatus(t, r), "INVALID_FIELD", c.field)
			})
		}
		// JSON bodies must be UTF-8 (the gateway's decoder says so): 400 too.
		r := e.Do(t, "alice", "POST", "/v1/teams?teamId=text-raw", `{"department":"departments/research","displayName":"`+"\xff"+`"}`)
		apiWantHTTP(t, r, http.StatusBadRequest)
	})

	for _, team := range apiListTeams(t, e, "alice", "") {
		if strings.HasPrefix(team.GetName(), "teams/text-") {
			t.Errorf("a refused create stored %s", team.GetName())
		}
	}
}
