package vclusterversions

import (
	"strings"
	"testing"
)

func catalog(t *testing.T) Catalog {
	t.Helper()
	c, err := NewCatalog("0.36.1", []string{"0.36.1", "v0.20.0"}, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewCatalogRefusesBadConfiguration(t *testing.T) {
	for _, tc := range []struct {
		def     string
		offered []string
		k8s     string
		want    string
	}{
		{"0.36.1", []string{"0.36.1", "0.24.0"}, "", `"0.24.0" is not one gpuplane can install (known: 0.36.1, 0.20.0)`},
		{"0.20.0", []string{"0.36.1"}, "", `default vCluster chart "0.20.0" is not among the offered versions (0.36.1)`},
		{"0.36.1", []string{"0.36.1"}, "v1.31.2", `Kubernetes "v1.31.2" is not offered with vCluster chart 0.36.1`},
		{"0.36.1", []string{"0.36.1"}, "1.29", `Kubernetes "1.29" is not offered`},
	} {
		_, err := NewCatalog(tc.def, tc.offered, tc.k8s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewCatalog(%q, %q, %q) = %v, want an error containing %q", tc.def, tc.offered, tc.k8s, err, tc.want)
		}
	}
	c, err := NewCatalog("v0.36.1", []string{"0.36.1", "0.36.1", " 0.20.0 ", ""}, "1.35")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.OfferedCharts(), ","); got != "0.36.1,0.20.0" {
		t.Errorf("offered %s", got)
	}
	if ch, p := c.Resolve("", ""); len(p) > 0 || ch.Kubernetes != "v1.35.0" {
		t.Errorf("configured default Kubernetes: %+v %v", ch, p)
	}
}

func TestResolve(t *testing.T) {
	c := catalog(t)
	for _, tc := range []struct {
		chart, k8s        string
		wantChart, wantK8 string
		wantProblem       string
	}{
		{"", "", "0.36.1", "v1.36.0", ""},
		{"", "1.33", "0.36.1", "v1.33.4", ""},
		{"v0.36.1", "v1.31.1", "0.36.1", "v1.31.1", ""},
		{"0.36.1", "1.31.2", "", "", `kubernetes: Kubernetes "1.31.2" is not offered with vCluster chart 0.36.1; offered: v1.36.0, v1.35.0`},
		{"0.36.1", "1.29", "", "", "kubernetes: "},
		{"0.36.1", "latest", "", "", "kubernetes: "},
		{"0.20.0", "", "0.20.0", "v1.30.2", ""}, // the chart's own default, not 0.36's
		{"0.20.0", "1.28.3", "0.20.0", "v1.28.3", ""},
		{"0.20.0", "1.31.1", "", "", "kubernetes: "},
		{"0.27.0", "", "", "", `chart: vCluster chart "0.27.0" is not offered; offered: 0.36.1, 0.20.0`},
	} {
		ch, problems := c.Resolve(tc.chart, tc.k8s)
		if tc.wantProblem != "" {
			if len(problems) != 1 || !strings.HasPrefix(problems[0].Field+": "+problems[0].Message, tc.wantProblem) {
				t.Errorf("Resolve(%q, %q) problems %+v, want %q", tc.chart, tc.k8s, problems, tc.wantProblem)
			}
			continue
		}
		if len(problems) > 0 || ch.Release.Chart != tc.wantChart || ch.Kubernetes != tc.wantK8 {
			t.Errorf("Resolve(%q, %q) = %s %s %v, want %s %s", tc.chart, tc.k8s, ch.Release.Chart, ch.Kubernetes, problems, tc.wantChart, tc.wantK8)
		}
	}
}

func TestUpgrade(t *testing.T) {
	c := catalog(t)
	for _, tc := range []struct {
		fromChart, fromK8s, chart, k8s string
		wantChart, wantK8              string
		wantProblem                    string
	}{
		// The old default (chart 0.20 with Kubernetes 1.31.1) moves to the
		// new chart keeping its Kubernetes version, which 0.36.1 ships.
		{"0.20.0", "v1.31.1", "0.36.1", "", "0.36.1", "v1.31.1", ""},
		{"0.20.0", "v1.30.5", "0.36.1", "", "0.36.1", "v1.30.2", ""},
		{"0.20.0", "v1.30.2", "0.36.1", "1.31", "0.36.1", "v1.31.1", ""},
		{"0.36.1", "v1.35.0", "", "1.36", "0.36.1", "v1.36.0", ""},
		{"0.20.0", "v1.30.2", "0.36.1", "1.33", "", "", "kubernetes: Kubernetes v1.33.4 skips minor versions from the current v1.30.2; upgrade one minor version at a time (next: 1.31)"},
		{"0.36.1", "v1.36.0", "", "1.35", "", "", "kubernetes: Kubernetes v1.35.0 is older than the current v1.36.0"},
		{"0.36.1", "v1.36.0", "0.20.0", "", "", "", "chart: vCluster chart 0.20.0 is older than the current 0.36.1; vCluster does not support downgrades"},
		{"0.20.0", "v1.30.2", "0.34.0", "", "", "", "chart: vCluster chart \"0.34.0\" is not offered"},
	} {
		ch, problems := c.Upgrade(tc.fromChart, tc.fromK8s, tc.chart, tc.k8s)
		if tc.wantProblem != "" {
			if len(problems) != 1 || !strings.HasPrefix(problems[0].Field+": "+problems[0].Message, tc.wantProblem) {
				t.Errorf("Upgrade(%s %s -> %q %q) problems %+v, want %q", tc.fromChart, tc.fromK8s, tc.chart, tc.k8s, problems, tc.wantProblem)
			}
			continue
		}
		if len(problems) > 0 || ch.Release.Chart != tc.wantChart || ch.Kubernetes != tc.wantK8 {
			t.Errorf("Upgrade(%s %s -> %q %q) = %s %s %v, want %s %s", tc.fromChart, tc.fromK8s, tc.chart, tc.k8s,
				ch.Release.Chart, ch.Kubernetes, problems, tc.wantChart, tc.wantK8)
		}
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"0.20.0", "0.36.1", -1}, {"v0.36.1", "0.36.1", 0}, {"0.36.1", "0.36.0", 1}, {"1.0.0", "0.99.9", 1}} {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%s, %s) = %d", tc.a, tc.b, got)
		}
	}
}

// Fractional GPUs on an old chart point at the newest chart that keeps
// host labels; only that chart renders "restricted" security contexts.
func TestChartCapabilities(t *testing.T) {
	if got := NewestKeepingHostLabels(); got != "0.36.1" {
		t.Errorf("NewestKeepingHostLabels = %q", got)
	}
	for chart, want := range map[string]bool{"0.36.1": true, "0.20.0": false} {
		r, ok := Known(chart)
		if !ok || r.RestrictedPodSecurity != want || r.HostLabelsSurvive != want {
			t.Errorf("chart %s: %+v", chart, r)
		}
	}
}
