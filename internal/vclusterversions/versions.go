// Package vclusterversions knows which vCluster chart versions gpuplane can
// install, which virtual Kubernetes versions each of them runs, and what
// each means for tenants (whether fractional GPUs are safe with it). It is
// pure data and checks: the API validates requests with it, the host-cluster
// client renders values with it.
package vclusterversions

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Release is one vCluster chart version gpuplane renders values for and
// has tested against its values.schema.json.
type Release struct {
	// Chart is the chart version without a "v" ("0.36.1"); the Go module
	// github.com/loft-sh/vcluster@v<Chart> carries the chart under chart/.
	Chart string
	// Kubernetes lists the virtual Kubernetes versions offered with this
	// chart, newest first; the first is the default. Each is an image tag
	// the chart's distro image exists with.
	Kubernetes []string
	// AnyPatch: the distro images are upstream Kubernetes images, which
	// exist for every patch release, so any v1.<minor>.<patch> of an
	// offered minor is accepted (chart 0.20). Otherwise only the tags in
	// Kubernetes exist (from 0.25 vCluster ships one ghcr.io/loft-sh/kubernetes
	// tag per minor).
	AnyPatch bool
	// HostLabelsSurvive: labels other controllers add to a host pod survive
	// the syncer's updates of that pod (a three-way merge since 0.21). KAI's
	// binder labels fractional-GPU pods on the host with runai-gpu-group and
	// reads it back, so fractional GPUs need this (docs/vcluster-verification.md).
	HostLabelsSurvive bool
	// RestrictedPodSecurity: with the securityContext values gpuplane
	// renders for a tier enforcing Pod Security "restricted" (non-root UID,
	// no privilege escalation, all capabilities dropped, RuntimeDefault
	// seccomp), the chart's control plane pod and the CoreDNS pod its
	// syncer writes to the host meet "restricted". 0.36.1 has the values
	// for every container (controlPlane.statefulSet.security,
	// controlPlane.distro.k8s.securityContext for the init container,
	// controlPlane.coredns.security) and runs non-root in vCluster's own
	// rootless e2e suite (e2e/vcluster-rootless.yaml); 0.20 runs its control
	// plane as root and has no CoreDNS pod security values
	// (docs/isolation.md, "Pod Security restricted").
	RestrictedPodSecurity bool
}

// releases are the chart versions gpuplane knows, newest first. The
// Kubernetes tags come from the chart itself: 0.20's compatibility matrix
// (docs/pages/deploying-vclusters/compat-matrix.mdx) and 0.36.1's
// config.K8SVersionMap (config/default_extra_values.go).
var releases = []Release{
	{
		Chart:                 "0.36.1",
		Kubernetes:            []string{"v1.36.0", "v1.35.0", "v1.34.0", "v1.33.4", "v1.32.1", "v1.31.1", "v1.30.2"},
		HostLabelsSurvive:     true,
		RestrictedPodSecurity: true,
	},
	{
		Chart:      "0.20.0",
		Kubernetes: []string{"v1.30.2", "v1.29.6", "v1.28.11", "v1.27.15"},
		AnyPatch:   true,
	},
}

// Known returns the release for a chart version ("0.36.1" or "v0.36.1").
func Known(chart string) (Release, bool) {
	chart = Normalize(chart)
	for _, r := range releases {
		if r.Chart == chart {
			return r, true
		}
	}
	return Release{}, false
}

// KnownCharts lists every chart version gpuplane can render, newest first.
func KnownCharts() []string {
	out := make([]string, len(releases))
	for i, r := range releases {
		out[i] = r.Chart
	}
	return out
}

// NewestKeepingHostLabels is the newest chart version whose syncer keeps
// the labels other controllers put on host pods (HostLabelsSurvive): the
// one to upgrade to for fractional GPUs.
func NewestKeepingHostLabels() string {
	for _, r := range releases {
		if r.HostLabelsSurvive {
			return r.Chart
		}
	}
	return ""
}

// Normalize drops a leading "v" and surrounding space from a chart version.
func Normalize(chart string) string { return strings.TrimPrefix(strings.TrimSpace(chart), "v") }

// DefaultKubernetes is the release's default virtual Kubernetes version.
func (r Release) DefaultKubernetes() string { return r.Kubernetes[0] }

// ResolveKubernetes turns a requested Kubernetes version into the image tag
// this chart runs: "" gives the default, "1.33" / "v1.33" the chart's tag
// for that minor, and an exact tag is kept when the chart offers it.
func (r Release) ResolveKubernetes(requested string) (string, error) {
	v := strings.TrimSpace(requested)
	if v == "" {
		return r.DefaultKubernetes(), nil
	}
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	minor, patch, ok := parseKubernetes(v)
	if ok {
		for _, tag := range r.Kubernetes {
			m, p, _ := parseKubernetes(tag)
			if m != minor {
				continue
			}
			switch {
			case patch < 0:
				return tag, nil // "v1.33": the chart's tag for that minor
			case p == patch || r.AnyPatch:
				return v, nil
			}
		}
	}
	//nolint:staticcheck // ST1005: "Kubernetes" is a proper noun; the message is a field violation shown as is.
	return "", fmt.Errorf("Kubernetes %q is not offered with vCluster chart %s; offered: %s (or just the minor, e.g. %q)",
		requested, r.Chart, strings.Join(r.Kubernetes, ", "), strings.TrimPrefix(majorMinor(r.Kubernetes[0]), "v"))
}

// KubernetesMinor returns the minor version of a "v1.N[.P]" string.
func KubernetesMinor(v string) (int, bool) {
	m, _, ok := parseKubernetes("v" + strings.TrimPrefix(strings.TrimSpace(v), "v"))
	return m, ok
}

// parseKubernetes reads "v1.N" (patch -1) or "v1.N.P".
func parseKubernetes(v string) (minor, patch int, ok bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "1" {
		return 0, 0, false
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil || minor < 0 {
		return 0, 0, false
	}
	patch = -1
	if len(parts) == 3 {
		if patch, err = strconv.Atoi(parts[2]); err != nil || patch < 0 {
			return 0, 0, false
		}
	}
	return minor, patch, true
}

func majorMinor(tag string) string {
	if i := strings.LastIndex(tag, "."); i > 0 && strings.Count(tag, ".") == 2 {
		return tag[:i]
	}
	return tag
}

// Compare orders two chart versions ("0.20.0" < "0.36.1"); unparsable
// parts compare as 0.
func Compare(a, b string) int {
	pa, pb := strings.Split(Normalize(a), "."), strings.Split(Normalize(b), ".")
	for i := 0; i < 3; i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Catalog is what the platform offers: the chart versions requests may
// name and the default for requests that name none.
type Catalog struct {
	defaultChart      string
	defaultKubernetes string
	offered           []Release
}

// NewCatalog checks the configuration: every offered chart must be one
// gpuplane knows, the default must be offered, and defaultKubernetes (may
// be empty: the default chart's own default) must run on the default chart.
func NewCatalog(defaultChart string, offered []string, defaultKubernetes string) (Catalog, error) {
	c := Catalog{defaultChart: Normalize(defaultChart)}
	for _, o := range offered {
		if Normalize(o) == "" {
			continue
		}
		r, ok := Known(o)
		if !ok {
			return Catalog{}, fmt.Errorf("vCluster chart %q is not one gpuplane can install (known: %s)", o, strings.Join(KnownCharts(), ", "))
		}
		if !slices.ContainsFunc(c.offered, func(x Release) bool { return x.Chart == r.Chart }) {
			c.offered = append(c.offered, r)
		}
	}
	def, ok := c.Offered(c.defaultChart)
	if !ok {
		return Catalog{}, fmt.Errorf("default vCluster chart %q is not among the offered versions (%s)", defaultChart, strings.Join(c.OfferedCharts(), ", "))
	}
	if defaultKubernetes != "" {
		k, err := def.ResolveKubernetes(defaultKubernetes)
		if err != nil {
			return Catalog{}, fmt.Errorf("default Kubernetes version: %w", err)
		}
		c.defaultKubernetes = k
	}
	return c, nil
}

// DefaultChart is the chart version of requests that name none.
func (c Catalog) DefaultChart() string { return c.defaultChart }

// OfferedCharts lists the offered chart versions in configuration order.
func (c Catalog) OfferedCharts() []string {
	out := make([]string, len(c.offered))
	for i, r := range c.offered {
		out[i] = r.Chart
	}
	return out
}

// Offered returns the release of an offered chart version.
func (c Catalog) Offered(chart string) (Release, bool) {
	chart = Normalize(chart)
	for _, r := range c.offered {
		if r.Chart == chart {
			return r, true
		}
	}
	return Release{}, false
}

// Choice is a resolved (chart, Kubernetes) pair.
type Choice struct {
	Release    Release
	Kubernetes string
}

// Problem is one reason a version choice is refused; Field is "chart" or
// "kubernetes".
type Problem struct {
	Field   string
	Message string
}

// Resolve checks a request's chart and Kubernetes versions, applying
// defaults: no chart means the default chart; no Kubernetes version means
// the configured default for the default chart, else the chart's own.
func (c Catalog) Resolve(chart, kubernetes string) (Choice, []Problem) {
	if Normalize(chart) == "" {
		chart = c.defaultChart
	}
	r, ok := c.Offered(chart)
	if !ok {
		return Choice{}, []Problem{{"chart", fmt.Sprintf("vCluster chart %q is not offered; offered: %s", chart, strings.Join(c.OfferedCharts(), ", "))}}
	}
	if strings.TrimSpace(kubernetes) == "" && r.Chart == c.defaultChart && c.defaultKubernetes != "" {
		kubernetes = c.defaultKubernetes
	}
	k, err := r.ResolveKubernetes(kubernetes)
	if err != nil {
		return Choice{Release: r}, []Problem{{"kubernetes", err.Error()}}
	}
	return Choice{Release: r, Kubernetes: k}, nil
}

// Upgrade checks moving a virtual cluster from (fromChart, fromKubernetes)
// to the requested versions: the chart may stay or move to a newer offered
// one (vCluster does not support downgrades), and the virtual Kubernetes
// minor may stay or go up by one (Kubernetes upgrades one minor at a time
// and never downgrades). An empty requested chart keeps the current one;
// an empty Kubernetes version keeps the current one when the new chart
// runs it, else takes the lowest the new chart offers above it.
func (c Catalog) Upgrade(fromChart, fromKubernetes, chart, kubernetes string) (Choice, []Problem) {
	if Normalize(chart) == "" {
		chart = fromChart
	}
	r, ok := c.Offered(chart)
	if !ok {
		return Choice{}, []Problem{{"chart", fmt.Sprintf("vCluster chart %q is not offered; offered: %s", chart, strings.Join(c.OfferedCharts(), ", "))}}
	}
	if Compare(r.Chart, fromChart) < 0 {
		return Choice{}, []Problem{{"chart", fmt.Sprintf("vCluster chart %s is older than the current %s; vCluster does not support downgrades", r.Chart, Normalize(fromChart))}}
	}
	if strings.TrimSpace(kubernetes) == "" {
		if k, err := r.ResolveKubernetes(fromKubernetes); err == nil {
			return Choice{Release: r, Kubernetes: k}, nil
		}
		// The current version is not offered with the new chart: the
		// lowest offered minor above it.
		cur, _ := KubernetesMinor(fromKubernetes)
		for i := len(r.Kubernetes) - 1; i >= 0; i-- {
			if m, _ := KubernetesMinor(r.Kubernetes[i]); m >= cur {
				kubernetes = r.Kubernetes[i]
				break
			}
		}
	}
	k, err := r.ResolveKubernetes(kubernetes)
	if err != nil {
		return Choice{Release: r}, []Problem{{"kubernetes", err.Error()}}
	}
	if cur, ok := KubernetesMinor(fromKubernetes); ok {
		next, _ := KubernetesMinor(k)
		switch {
		case next < cur:
			return Choice{Release: r}, []Problem{{"kubernetes", fmt.Sprintf("Kubernetes %s is older than the current %s; Kubernetes does not support downgrades", k, fromKubernetes)}}
		case next > cur+1:
			return Choice{Release: r}, []Problem{{"kubernetes", fmt.Sprintf("Kubernetes %s skips minor versions from the current %s; upgrade one minor version at a time (next: 1.%d)", k, fromKubernetes, cur+1)}}
		}
	}
	return Choice{Release: r, Kubernetes: k}, nil
}
