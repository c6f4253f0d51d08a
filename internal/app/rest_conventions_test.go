package app_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// The REST API as clients generated from api/openapi.yaml see it
// (docs/api-conventions.md): JSON names everywhere, zero values present,
// quantities accepted, every error a google.rpc.Status with an ErrorInfo,
// and every answer the document's.

func TestRESTZeroValuesArePresent(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	doc := apptest.OpenAPI(t)

	// A request that does not fit: fits is false, not missing.
	body := map[string]any{"request": map[string]any{"team": "teams/team-a",
		"changeTeamQuota": map[string]any{"quota": map[string]any{"gpu": "100"}}}}
	r := e.Do(t, "bob", "POST", "/v1/requests:checkFit", body)
	apiWantHTTP(t, r, http.StatusOK)
	doc.Check(t, "POST", "/v1/requests:checkFit", r)
	fit := r.Map(t)
	if v, ok := fit["fits"]; !ok || v != false {
		t.Errorf("fits = %v (present %v), want false", v, ok)
	}
	// One that fits: an empty list of shortfalls, not a missing one.
	body["request"].(map[string]any)["changeTeamQuota"] = map[string]any{"quota": map[string]any{"gpu": "1"}}
	r = e.Do(t, "bob", "POST", "/v1/requests:checkFit", body)
	doc.Check(t, "POST", "/v1/requests:checkFit", r)
	if fit := r.Map(t); fit["fits"] != true || fit["shortfalls"] == nil {
		t.Errorf("fit = %v, want fits true and shortfalls []", fit)
	}

	// A new virtual cluster shows all three allocated amounts, zero included.
	r = e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
		"createVirtualCluster": map[string]any{"virtualClusterId": "zero", "spec": map[string]any{"quota": map[string]any{"cpu": "1"}}}})
	apiWantHTTP(t, r, http.StatusOK)
	doc.Check(t, "POST", "/v1/requests", r)
	r = e.Do(t, "bob", "GET", "/v1/teams/team-a/virtualClusters/zero", nil)
	doc.Check(t, "GET", "/v1/teams/team-a/virtualClusters/zero", r)
	alloc, _ := r.Map(t)["status"].(map[string]any)["allocated"].(map[string]any)
	for _, k := range []string{"gpu", "cpuMillis", "memoryBytes"} {
		if _, ok := alloc[k]; !ok {
			t.Errorf("status.allocated has no %s: %v", k, alloc)
		}
	}
	// Unset messages stay absent rather than null: no limit was asked for.
	spec := r.Map(t)["spec"].(map[string]any)
	if v, ok := spec["limit"]; ok {
		t.Errorf("spec.limit = %v, want absent", v)
	}
}

func TestRESTQuantities(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	doc := apptest.OpenAPI(t)
	create := func(id string, quota map[string]any) apptest.Response {
		return e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
			"createVirtualCluster": map[string]any{"virtualClusterId": id, "spec": map[string]any{"quota": quota}}})
	}
	const field = "request.createVirtualCluster.spec.quota."

	t.Run("Kubernetes quantities in cpu and memory", func(t *testing.T) {
		r := create("qty", map[string]any{"gpu": "1", "cpu": "16", "memory": "64Gi"})
		apiWantHTTP(t, r, http.StatusOK)
		doc.Check(t, "POST", "/v1/requests", r)
		q := r.Map(t)["createVirtualCluster"].(map[string]any)["spec"].(map[string]any)["quota"].(map[string]any)
		if q["cpuMillis"] != "16000" || q["memoryBytes"] != "68719476736" {
			t.Errorf("quota = %v, want cpuMillis 16000 and memoryBytes 68719476736", q)
		}
		if _, ok := q["cpu"]; ok {
			t.Errorf("responses carry canonical numbers only; got cpu in %v", q)
		}
		if _, ok := q["memory"]; ok {
			t.Errorf("responses carry canonical numbers only; got memory in %v", q)
		}
	})
	t.Run("millicores", func(t *testing.T) {
		r := create("milli", map[string]any{"cpu": "500m"})
		apiWantHTTP(t, r, http.StatusOK)
		if q := r.Map(t)["createVirtualCluster"].(map[string]any)["spec"].(map[string]any)["quota"].(map[string]any); q["cpuMillis"] != "500" {
			t.Errorf("cpu 500m gave %v", q)
		}
	})
	for _, c := range []struct {
		name      string
		quota     map[string]any
		field     string
		mustSay   []string
		reasonAny bool
	}{
		{"a quantity in memoryBytes", map[string]any{"memoryBytes": "64Gi"}, field + "memoryBytes", []string{"bytes as an integer", "use memory", `"64Gi"`}, false},
		{"a quantity in cpuMillis", map[string]any{"cpuMillis": "16 CPU"}, field + "cpuMillis", []string{"millicores", "use cpu"}, false},
		{"a unit cpu does not know", map[string]any{"cpu": "16 cores"}, field + "cpu", []string{`"16 cores"`, "500m"}, false},
		{"a unit memory does not know", map[string]any{"memory": "64GB"}, field + "memory", []string{`"64GB"`, "64Gi"}, false},
		{"cpu and cpuMillis disagree", map[string]any{"cpu": "16", "cpuMillis": "16"}, field + "cpu", []string{"16 CPU", "16m"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := create("bad", c.quota)
			apiWantHTTP(t, r, http.StatusBadRequest)
			doc.Check(t, "POST", "/v1/requests", r)
			st := apiRESTStatus(t, r)
			if ei := apiErrorInfo(t, st); ei.GetReason() != "INVALID_FIELD" {
				t.Errorf("reason %q", ei.GetReason())
			}
			v := apiViolations(t, st)
			desc, ok := v[c.field]
			if !ok {
				t.Fatalf("no violation on %s: %v", c.field, v)
			}
			for _, s := range c.mustSay {
				if !strings.Contains(desc, s) {
					t.Errorf("%s: %q does not say %q", c.field, desc, s)
				}
			}
			if strings.Contains(st.Message(), "proto:") || strings.Contains(desc, "proto:") {
				t.Errorf("a raw protojson error reached the caller: %s", r.Body)
			}
		})
	}
	t.Run("cpu and cpuMillis that agree", func(t *testing.T) {
		r := create("agree", map[string]any{"cpu": "2", "cpuMillis": "2000"})
		apiWantHTTP(t, r, http.StatusOK)
	})
	t.Run("a team quota by PATCH, in quantities", func(t *testing.T) {
		r := e.Do(t, "alice", "PATCH", "/v1/teams/team-a", map[string]any{"quota": map[string]any{"memory": "128Gi"}})
		apiWantHTTP(t, r, http.StatusOK)
		doc.Check(t, "PATCH", "/v1/teams/team-a", r)
		q := r.Map(t)["quota"].(map[string]any)
		if q["memoryBytes"] != "137438953472" || q["gpu"] != "4" || q["cpuMillis"] != "32000" {
			t.Errorf("quota after PATCH of memory only = %v (want gpu and cpu unchanged)", q)
		}
	})
}

func TestRESTBodyErrorsNameTheField(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	doc := apptest.OpenAPI(t)
	for _, c := range []struct {
		name, method, path string
		body               any
		field              string
		mustSay            string
	}{
		{"unknown field", "POST", "/v1/teams?teamId=x", map[string]any{"department": "departments/research", "owner": "bob"}, "team.owner", "unknown field"},
		{"unknown enum value", "POST", "/v1/teams/team-a/members", map[string]any{"user": "z@example.org", "role": "SUPERUSER"}, "member.role", "OWNER, MEMBER, VIEWER"},
		{"string for a bool", "POST", "/v1/requests", map[string]any{"team": "teams/team-a", "createVirtualCluster": map[string]any{
			"virtualClusterId": "x", "spec": map[string]any{"allowFractionalGpus": "yes"}}}, "request.createVirtualCluster.spec.allowFractionalGpus", "true or false"},
		{"two members of a oneof", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
			"deleteVirtualCluster":      map[string]any{"virtualCluster": "teams/team-a/virtualClusters/x"},
			"createVirtualCluster":      map[string]any{"virtualClusterId": "x"},
			"changeVirtualClusterQuota": nil}, "request.deleteVirtualCluster", "only one of"},
		{"a time that is not RFC 3339", "POST", "/v1/requests", map[string]any{"team": "teams/team-a", "createVirtualCluster": map[string]any{
			"virtualClusterId": "x", "spec": map[string]any{"expireTime": "tomorrow"}}}, "request.createVirtualCluster.spec.expireTime", "RFC 3339"},
		{"not JSON", "POST", "/v1/requests/rabc:approve", "{reason:", "body", "not valid JSON"},
		{"a query parameter that is no integer", "GET", "/v1/teams?pageSize=ten", nil, "pageSize", "invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do(t, "alice", c.method, c.path, c.body)
			apiWantHTTP(t, r, http.StatusBadRequest)
			doc.Check(t, c.method, c.path, r)
			st := apiRESTStatus(t, r)
			if st.Code() != codes.InvalidArgument || apiErrorInfo(t, st).GetReason() != "INVALID_FIELD" {
				t.Errorf("status %v %q", st.Code(), apiErrorInfo(t, st).GetReason())
			}
			v := apiViolations(t, st)
			if !strings.Contains(v[c.field], c.mustSay) {
				t.Errorf("violations %v: want %q on %s", v, c.mustSay, c.field)
			}
			if strings.Contains(string(r.Body), "proto:") {
				t.Errorf("a raw protojson error reached the caller: %s", r.Body)
			}
		})
	}
}

func TestRESTFieldsByJSONName(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	doc := apptest.OpenAPI(t)

	t.Run("violations and the message name JSON paths", func(t *testing.T) {
		r := e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
			"createVirtualCluster": map[string]any{"virtualClusterId": "Bad_Id", "spec": map[string]any{"quota": map[string]any{"cpuMillis": "-1"}}}})
		apiWantHTTP(t, r, http.StatusBadRequest)
		doc.Check(t, "POST", "/v1/requests", r)
		st := apiRESTStatus(t, r)
		v := apiViolations(t, st)
		for _, f := range []string{"request.createVirtualCluster.virtualClusterId", "request.createVirtualCluster.spec.quota.cpuMillis"} {
			if _, ok := v[f]; !ok {
				t.Errorf("no violation on %s: %v", f, v)
			}
			if !strings.Contains(st.Message(), f) {
				t.Errorf("message %q does not name %s", st.Message(), f)
			}
		}
		if strings.Contains(string(r.Body), "_") && strings.Contains(string(r.Body), "virtual_cluster") {
			t.Errorf("a proto name leaked: %s", r.Body)
		}
	})
	t.Run("gRPC callers keep proto paths", func(t *testing.T) {
		_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: wfCreateVC("team-a", "Bad_Id", wfQuotaSpec())})
		if f := wfExpect(t, err, codes.InvalidArgument, "INVALID_FIELD"); f.Violations["request.create_virtual_cluster.virtual_cluster_id"] == "" {
			t.Errorf("violations %v", f.Violations)
		}
	})
	t.Run("updateMask in JSON names", func(t *testing.T) {
		r := e.Do(t, "alice", "PATCH", "/v1/departments/research?updateMask=displayName,quotaBudget.gpu",
			map[string]any{"displayName": "Research (renamed)", "quotaBudget": map[string]any{"gpu": "9", "cpuMillis": "1"}})
		apiWantHTTP(t, r, http.StatusOK)
		doc.Check(t, "PATCH", "/v1/departments/research", r)
		d := r.Map(t)
		if d["displayName"] != "Research (renamed)" {
			t.Errorf("displayName = %v", d["displayName"])
		}
		if q := d["quotaBudget"].(map[string]any); q["gpu"] != "9" || q["cpuMillis"] != "128000" {
			t.Errorf("quotaBudget = %v, want gpu 9 and cpu unchanged (not in the mask)", q)
		}
		r = e.Do(t, "alice", "PATCH", "/v1/departments/research?updateMask=ownerGroup", map[string]any{})
		apiWantHTTP(t, r, http.StatusBadRequest)
		st := apiRESTStatus(t, r)
		if !strings.Contains(apiViolations(t, st)["updateMask"], "displayName, quotaBudget, adminGroups") {
			t.Errorf("the refusal should list the updatable paths as JSON names: %v", apiViolations(t, st))
		}
	})
	t.Run("filters take JSON names", func(t *testing.T) {
		r := e.Do(t, "alice", "GET", "/v1/teams?filter="+url.QueryEscape("isolationTier = DEDICATED"), nil)
		apiWantHTTP(t, r, http.StatusOK)
		doc.Check(t, "GET", "/v1/teams", r)
		teams := r.Map(t)["teams"].([]any)
		if len(teams) != 1 || teams[0].(map[string]any)["name"] != "teams/team-b" {
			t.Errorf("DEDICATED teams = %v", teams)
		}
	})
	t.Run("ErrorInfo metadata keys are JSON names", func(t *testing.T) {
		r := e.Do(t, "bob", "POST", "/v1/requests", map[string]any{"team": "teams/team-a",
			"createVirtualCluster": map[string]any{"virtualClusterId": "dup", "spec": map[string]any{"quota": map[string]any{"cpu": "1"}}}})
		apiWantHTTP(t, r, http.StatusOK)
		r = e.Do(t, "alice", "DELETE", "/v1/teams/team-a", nil)
		apiWantHTTP(t, r, http.StatusBadRequest)
		doc.Check(t, "DELETE", "/v1/teams/team-a", r)
		md := apiErrorInfo(t, apiRESTStatus(t, r)).GetMetadata()
		if md["virtualClusters"] == "" {
			t.Errorf("metadata %v, want virtualClusters", md)
		}
	})
}

func TestRESTRoutingErrors(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	for _, c := range []struct {
		method, path string
		status       int
		reason       string
		allow        string
	}{
		{"PUT", "/v1/teams/team-a", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "DELETE, GET, PATCH"},
		{"DELETE", "/v1/requests", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "GET, POST"},
		{"DELETE", "/v1/requests/r1", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "GET"},
		{"GET", "/v1/requests/r1:cancel", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "POST"},
		{"POST", "/healthz", http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "GET, HEAD"},
		{"GET", "/v1/team/team-a", http.StatusNotFound, "ROUTE_NOT_FOUND", ""},
		{"GET", "/v1/teams/team-a/virtualclusters", http.StatusNotFound, "ROUTE_NOT_FOUND", ""},
		{"GET", "/v2/teams", http.StatusNotFound, "ROUTE_NOT_FOUND", ""},
		{"GET", "/", http.StatusNotFound, "ROUTE_NOT_FOUND", ""},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := e.Do(t, "alice", c.method, c.path, nil)
			apiWantHTTP(t, r, c.status)
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if got := r.Header.Get("Allow"); got != c.allow {
				t.Errorf("Allow %q, want %q", got, c.allow)
			}
			st := apiRESTStatus(t, r)
			if ei := apiErrorInfo(t, st); ei.GetReason() != c.reason || ei.GetDomain() != "gpuplane.dev" {
				t.Errorf("ErrorInfo %v, want reason %s", ei, c.reason)
			}
			apptest.OpenAPI(t).CheckSchema(t, "Status", r.Map(t))
		})
	}
}

// wfQuotaSpec is a small valid spec.
func wfQuotaSpec() *pb.VirtualClusterSpec {
	return &pb.VirtualClusterSpec{Quota: wfQuota("0", 1000, 0)}
}
