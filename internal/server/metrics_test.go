package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

// TestMetricsEndpoint scrapes /metrics of a real server (`serve
// --run-worker` against a real API server) after some traffic and a
// reconcile, fails on any promlint problem, and checks every gpuplane
// metric family: type, labels and a few values.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	envtestenv.SkipIfShort(t)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, err := envtestenv.Start(sctx, envtestenv.Options{})
	if err != nil {
		t.Fatalf("real API server needed: %v", err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	e := apptest.Start(t, apptest.Options{Seed: true, HostConfig: api.RESTConfig(), RunWorker: true})

	// Traffic: REST and gRPC, a failure, the plain endpoints, and a
	// request approved so the worker reconciles something.
	if r := e.Do(t, "alice", "GET", "/v1/teams", nil); r.Status != http.StatusOK {
		t.Fatalf("list teams: %d %s", r.Status, r.Body)
	}
	if r := e.Do(t, "", "GET", "/v1/teams", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("list teams without a token: %d", r.Status)
	}
	if _, err := e.Teams.ListTeams(e.As(t, "bob"), &pb.ListTeamsRequest{}); err != nil {
		t.Fatal(err)
	}
	// REST calls without a token stop before the gateway (the HTTP metrics
	// count them); gRPC ones reach the interceptor.
	if _, err := e.Teams.ListTeams(context.Background(), &pb.ListTeamsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC list teams without a token: %v", err)
	}
	apptest.Scrape(t, e.HTTPBase+"/healthz")
	apptest.Scrape(t, e.HTTPBase+"/openapi.json")
	asked := e.Do(t, "bob", "POST", "/v1/requests", map[string]any{
		"team": "teams/team-a", "justification": "metrics",
		"createVirtualCluster": map[string]any{"virtualClusterId": "metrics-vc",
			"spec": map[string]any{"quota": map[string]any{"gpu": "1", "cpuMillis": "1000", "memoryBytes": "1073741824"}}},
	})
	if asked.Status != http.StatusOK {
		t.Fatalf("create request: %d %s", asked.Status, asked.Body)
	}
	name := asked.Map(t)["name"].(string)
	if r := e.Do(t, "alice", "POST", "/v1/"+name+":approve", map[string]any{}); r.Status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}

	var mfs map[string]*dto.MetricFamily
	var body []byte
	deadline := time.Now().Add(2 * time.Minute)
	for {
		body = apptest.Scrape(t, e.MetricsBase+"/metrics")
		mfs = apptest.ParseMetrics(t, body)
		if mf := mfs["gpuplane_reconcile_total"]; mf != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker reconciled nothing within 2 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}

	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	type family struct {
		typ    dto.MetricType
		labels []string
	}
	counter, gauge, histogram := dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	want := map[string]family{
		"gpuplane_grpc_server_handled_total":                      {counter, []string{"code", "method"}},
		"gpuplane_grpc_server_handling_seconds":                   {histogram, []string{"code", "method"}},
		"gpuplane_http_server_requests_total":                     {counter, []string{"code", "method", "route"}},
		"gpuplane_http_server_request_duration_seconds":           {histogram, []string{"method", "route"}},
		"gpuplane_reconcile_queue_depth":                          {gauge, nil},
		"gpuplane_reconcile_queue_due":                            {gauge, nil},
		"gpuplane_reconcile_queue_leased":                         {gauge, nil},
		"gpuplane_reconcile_queue_oldest_due_age_seconds":         {gauge, nil},
		"gpuplane_reconcile_total":                                {counter, []string{"kind", "outcome"}},
		"gpuplane_reconcile_duration_seconds":                     {histogram, []string{"kind", "outcome"}},
		"gpuplane_reconcile_step_duration_seconds":                {histogram, []string{"step"}},
		"gpuplane_reconcile_in_flight":                            {gauge, nil},
		"gpuplane_reconcile_provisioning_deadline_exceeded_total": {counter, nil},
		"gpuplane_virtual_clusters":                               {gauge, []string{"phase"}},
		"gpuplane_requests":                                       {gauge, []string{"state"}},
		"gpuplane_team_quota":                                     {gauge, []string{"resource", "team"}},
		"gpuplane_team_allocated":                                 {gauge, []string{"resource", "team"}},
		"gpuplane_metrics_query_up":                               {gauge, []string{"query"}},
		"gpuplane_metrics_query_duration_seconds":                 {gauge, []string{"query"}},
		"gpuplane_store_group_batches_total":                      {counter, nil},
		"gpuplane_store_group_members_total":                      {counter, nil},
		"gpuplane_store_group_round_trips_total":                  {counter, nil},
		"gpuplane_store_group_set_flushes_total":                  {counter, nil},
		"gpuplane_store_group_set_fallbacks_total":                {counter, nil},
	}
	var listing []string
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "gpuplane_") {
			continue
		}
		var labels []string
		if len(mf.GetMetric()) > 0 {
			for _, lp := range mf.GetMetric()[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		sort.Strings(labels)
		listing = append(listing, fmt.Sprintf("%-50s %-9s {%s}", name, strings.ToLower(mf.GetType().String()), strings.Join(labels, ",")))
		w, ok := want[name]
		if !ok {
			t.Errorf("unexpected metric family %s: add it to this test", name)
			continue
		}
		if mf.GetType() != w.typ || !slices.Equal(labels, w.labels) {
			t.Errorf("%s: %v {%v}, want %v {%v}", name, mf.GetType(), labels, w.typ, w.labels)
		}
	}
	for name := range want {
		if mfs[name] == nil {
			t.Errorf("metric family %s missing", name)
		}
	}
	sort.Strings(listing)
	t.Logf("gpuplane metrics:\n%s", strings.Join(listing, "\n"))

	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		// Demo data: team-a has 4 GPUs, 32 cores, 256Gi.
		{"gpuplane_team_quota", map[string]string{"team": "team-a", "resource": "gpu"}, 4},
		{"gpuplane_team_quota", map[string]string{"team": "team-a", "resource": "cpu"}, 32},
		{"gpuplane_team_quota", map[string]string{"team": "team-a", "resource": "memory"}, 256 << 30},
		{"gpuplane_team_allocated", map[string]string{"team": "team-a", "resource": "gpu"}, 0},
		{"gpuplane_requests", map[string]string{"state": "PENDING"}, 0},
		{"gpuplane_virtual_clusters", map[string]string{"phase": "PROVISIONING"}, 1},
		{"gpuplane_grpc_server_handled_total", map[string]string{"method": "/gpuplane.v1.RequestService/ApproveRequest", "code": "OK"}, 1},
		{"gpuplane_grpc_server_handled_total", map[string]string{"method": "/gpuplane.v1.TeamService/ListTeams", "code": "Unauthenticated"}, 1},
		{"gpuplane_http_server_requests_total", map[string]string{"route": "/healthz", "method": "GET", "code": "200"}, 1},
		{"gpuplane_http_server_requests_total", map[string]string{"route": "/v1/", "method": "GET", "code": "401"}, 1},
		{"gpuplane_metrics_query_up", map[string]string{"query": "reconcile_queue"}, 1},
		{"gpuplane_metrics_query_up", map[string]string{"query": "virtual_clusters"}, 1},
		{"gpuplane_metrics_query_up", map[string]string{"query": "requests"}, 1},
		{"gpuplane_metrics_query_up", map[string]string{"query": "teams"}, 1},
		{"gpuplane_reconcile_queue_depth", nil, 1},
	} {
		got, ok := apptest.MetricValue(mfs[c.metric], c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.metric, c.labels, got, ok, c.want)
		}
	}
	// The request is APPROVED, or APPLIED once the worker saw the host
	// reflect it.
	approved, _ := apptest.MetricValue(mfs["gpuplane_requests"], map[string]string{"state": "APPROVED"})
	applied, _ := apptest.MetricValue(mfs["gpuplane_requests"], map[string]string{"state": "APPLIED"})
	if approved+applied != 1 {
		t.Errorf("gpuplane_requests: APPROVED %v + APPLIED %v, want 1", approved, applied)
	}
	if n, ok := apptest.MetricValue(mfs["gpuplane_reconcile_step_duration_seconds"], map[string]string{"step": "apply"}); !ok || n < 1 {
		t.Errorf("no apply step recorded")
	}
	if n, ok := apptest.MetricValue(mfs["gpuplane_reconcile_step_duration_seconds"], map[string]string{"step": "apply_namespace"}); !ok || n < 1 {
		t.Errorf("no apply_namespace step recorded")
	}
}
