package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

// TestVClusterVersions: requests get the default chart and Kubernetes
// version, may name another offered one, and are refused with 400 and the
// offered list otherwise; fractional GPUs are refused on chart 0.20, whose
// syncer drops the labels KAI's binder puts on shared-GPU pods.
func TestVClusterVersions(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	spec := "request.create_virtual_cluster.spec."
	create := func(id string, s *pb.VirtualClusterSpec) (*pb.Request, error) {
		if s.Quota == nil {
			s.Quota = wfQuota("0", 10, 0)
		}
		return e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: wfCreateVC("team-a", id, s)})
	}
	stored := func(r *pb.Request) (string, string) {
		s := r.GetCreateVirtualCluster().GetSpec()
		return s.GetChartVersion(), s.GetKubernetesVersion()
	}

	for _, tc := range []struct {
		name, chart, k8s string
		fractional       bool
		wantChart        string
		wantK8s          string
	}{
		{"defaults", "", "", false, "0.36.1", "v1.36.0"},
		{"a minor of the default chart", "", "1.33", false, "0.36.1", "v1.33.4"},
		{"the chart existing clusters run", "v0.20.0", "", false, "0.20.0", "v1.30.2"},
		{"fractional GPUs on the default chart", "", "", true, "0.36.1", "v1.36.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := create("v-"+strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"),
				&pb.VirtualClusterSpec{ChartVersion: tc.chart, KubernetesVersion: tc.k8s, AllowFractionalGpus: tc.fractional})
			if err != nil {
				t.Fatal(err)
			}
			if c, k := stored(r); c != tc.wantChart || k != tc.wantK8s {
				t.Errorf("stored chart %s, Kubernetes %s; want %s, %s", c, k, tc.wantChart, tc.wantK8s)
			}
		})
	}

	for _, tc := range []struct {
		name       string
		spec       *pb.VirtualClusterSpec
		field      string
		wantInText []string
	}{
		{"a chart not offered", &pb.VirtualClusterSpec{ChartVersion: "0.27.0"}, spec + "chart_version",
			[]string{`vCluster chart "0.27.0" is not offered; offered: 0.36.1, 0.20.0`}},
		{"a Kubernetes version the chart does not run", &pb.VirtualClusterSpec{KubernetesVersion: "1.29"}, spec + "kubernetes_version",
			[]string{`Kubernetes "1.29" is not offered with vCluster chart 0.36.1; offered: v1.36.0`}},
		{"a patch release the chart does not ship", &pb.VirtualClusterSpec{KubernetesVersion: "v1.33.0"}, spec + "kubernetes_version",
			[]string{"v1.33.4"}},
		{"fractional GPUs on chart 0.20", &pb.VirtualClusterSpec{ChartVersion: "0.20.0", AllowFractionalGpus: true, Quota: wfQuota("0.5", 0, 0)},
			spec + "allow_fractional_gpus", []string{"not available with vCluster chart 0.20.0", "runai-gpu-group", "use chart 0.36.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := create("refused", tc.spec)
			f := wfExpect(t, err, codes.InvalidArgument, "INVALID_FIELD")
			desc, ok := f.Violations[tc.field]
			if !ok {
				t.Fatalf("no violation on %s: %v", tc.field, f.Violations)
			}
			for _, want := range tc.wantInText {
				if !strings.Contains(desc, want) {
					t.Errorf("%s: %q does not say %q", tc.field, desc, want)
				}
			}
		})
	}

	t.Run("REST: 400 with the offered versions", func(t *testing.T) {
		resp := e.Do(t, "bob", http.MethodPost, "/v1/requests", map[string]any{"team": "teams/team-a", "justification": "x",
			"createVirtualCluster": map[string]any{"virtualClusterId": "rest-v",
				"spec": map[string]any{"quota": map[string]any{"cpuMillis": "10"}, "chartVersion": "0.24.0"}}})
		if resp.Status != http.StatusBadRequest {
			t.Fatalf("status %d: %s", resp.Status, resp.Body)
		}
		f := wfRESTFailure(t, resp)
		if d := f.Violations["request.createVirtualCluster.spec.chartVersion"]; !strings.Contains(d, "offered: 0.36.1, 0.20.0") { // REST: JSON names
			t.Errorf("violations %v", f.Violations)
		}
	})
}

// TestVClusterVersionUpgradeRequests: CHANGE_VIRTUAL_CLUSTER_VERSION moves
// an existing virtual cluster forward, never back, one Kubernetes minor at
// a time; approved, it bumps the generation like any change.
func TestVClusterVersionUpgradeRequests(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	old := wfCreate(t, e, "bob", wfCreateVC("team-a", "legacy", &pb.VirtualClusterSpec{Quota: wfQuota("0", 10, 0), ChartVersion: "0.20.0"}))
	wfApprove(t, e, "alice", old.GetName())
	upgrade := func(chart, k8s string) *pb.Request {
		return &pb.Request{Team: "teams/team-a", Justification: "newer vCluster", Payload: &pb.Request_ChangeVirtualClusterVersion{
			ChangeVirtualClusterVersion: &pb.ChangeVirtualClusterVersionPayload{VirtualCluster: "teams/team-a/virtualClusters/legacy",
				ChartVersion: chart, KubernetesVersion: k8s}}}
	}
	f := "request.change_virtual_cluster_version."
	for _, tc := range []struct {
		name, chart, k8s, field, want string
	}{
		{"nothing to change", "0.20.0", "", f + "chart_version", "already runs vCluster chart 0.20.0 with Kubernetes v1.30.2"},
		{"a chart not offered", "0.34.0", "", f + "chart_version", "not offered; offered: 0.36.1, 0.20.0"},
		{"skipping Kubernetes minors", "0.36.1", "1.33", f + "kubernetes_version", "upgrade one minor version at a time (next: 1.31)"},
		{"a Kubernetes downgrade", "", "1.29", f + "kubernetes_version", "older than the current v1.30.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: upgrade(tc.chart, tc.k8s)})
			fail := wfExpect(t, err, codes.InvalidArgument, "INVALID_FIELD")
			if d := fail.Violations[tc.field]; !strings.Contains(d, tc.want) {
				t.Errorf("violation on %s = %q, want %q (all: %v)", tc.field, d, tc.want, fail.Violations)
			}
		})
	}

	before, err := e.VirtualCluster.GetVirtualCluster(e.As(t, "bob"), &pb.GetVirtualClusterRequest{Name: "teams/team-a/virtualClusters/legacy"})
	if err != nil {
		t.Fatal(err)
	}
	r := wfCreate(t, e, "bob", upgrade("0.36.1", ""))
	if p := r.GetChangeVirtualClusterVersion(); r.GetKind() != pb.Request_CHANGE_VIRTUAL_CLUSTER_VERSION ||
		p.GetChartVersion() != "0.36.1" || p.GetKubernetesVersion() != "v1.30.2" {
		t.Errorf("stored request %s %+v; want chart 0.36.1 keeping Kubernetes v1.30.2", r.GetKind(), p)
	}
	approved := wfApprove(t, e, "alice", r.GetName())
	if approved.GetState() != pb.Request_APPROVED {
		t.Fatalf("state %s", approved.GetState())
	}
	after, err := e.VirtualCluster.GetVirtualCluster(e.As(t, "bob"), &pb.GetVirtualClusterRequest{Name: "teams/team-a/virtualClusters/legacy"})
	if err != nil {
		t.Fatal(err)
	}
	if s := after.GetSpec(); s.GetChartVersion() != "0.36.1" || s.GetKubernetesVersion() != "v1.30.2" || after.GetGeneration() != before.GetGeneration()+1 {
		t.Errorf("after approval: chart %s, Kubernetes %s, generation %d (was %d)", s.GetChartVersion(), s.GetKubernetesVersion(),
			after.GetGeneration(), before.GetGeneration())
	}
	// Back down is refused.
	_, err = e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: upgrade("0.20.0", "")})
	if fail := wfExpect(t, err, codes.InvalidArgument, "INVALID_FIELD"); !strings.Contains(fail.Violations[f+"chart_version"], "does not support downgrades") {
		t.Errorf("downgrade: %v", fail.Violations)
	}
}

// TestVClusterVersionConfiguration: a catalog that cannot work is refused
// at start, naming the problem.
func TestVClusterVersionConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mod    func(*app.Config)
		wanted string
	}{
		{"unknown offered version", func(c *app.Config) { c.VClusterChartVersions = "0.36.1,0.24.0" }, `"0.24.0" is not one gpuplane can install`},
		{"default not offered", func(c *app.Config) { c.VClusterChartVersions = "0.20.0" }, `default vCluster chart "0.36.1" is not among the offered versions (0.20.0)`},
		{"default Kubernetes the chart does not run", func(c *app.Config) { c.DefaultKubernetesVersion = "v1.31.1"; c.DefaultChartVersion = "0.20.0" },
			`default Kubernetes version: Kubernetes "v1.31.1" is not offered with vCluster chart 0.20.0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := app.Defaults()
			cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
			cfg.DatabaseURL = storetest.New(t)
			cfg.OIDCIssuerURL = apptest.Issuer(t).IssuerURL()
			tc.mod(&cfg)
			ctx, cancel := context.WithCancel(context.Background())
			a, err := app.New(ctx, cfg, app.Options{})
			if err == nil {
				cancel()
				_ = a.Run(ctx)
				t.Fatal("started with this configuration")
			}
			cancel()
			if !strings.Contains(err.Error(), tc.wanted) {
				t.Errorf("error %q, want %q", err, tc.wanted)
			}
		})
	}
}
