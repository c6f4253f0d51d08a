package hostcluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/names"
)

const gib = int64(1) << 30

func testVC(name, team, dept, tier string) VirtualCluster {
	pool := ""
	switch tier {
	case TierDedicated:
		pool = names.DedicatedPool(team)
	case TierSandbox:
		pool = names.SandboxPool(team)
	}
	return VirtualCluster{
		Name: name, Team: team, Department: dept, Tier: tier, Pool: pool,
		AllowFractionalGPUs: tier == TierShared,
		Leaf: QueueSpec{
			Quota:           Quantities{GPUCenti: 200, CPUMillis: 16000, MemoryBytes: 64 * gib},
			Limit:           &Quantities{GPUCenti: 400, CPUMillis: 32000, MemoryBytes: 128 * gib},
			OverQuotaWeight: 1,
		},
		TeamQueue:         QueueSpec{Quota: Quantities{GPUCenti: 800, CPUMillis: 64000, MemoryBytes: 256 * gib}, OverQuotaWeight: 2, Priority: 120},
		DepartmentQueue:   QueueSpec{Quota: Quantities{GPUCenti: 1600, CPUMillis: 128000, MemoryBytes: 512 * gib}, OverQuotaWeight: 1},
		KubernetesVersion: "v1.35.0",
		ChartVersion:      newChart,
		Generation:        1,
	}
}

// The chart versions gpuplane offers by default: the current one, and the
// one virtual clusters created before it keep until they are upgraded.
const (
	newChart = "0.36.1"
	oldChart = "0.20.0"
)

// oldVC is testVC on chart 0.20 with a Kubernetes version it runs.
func oldVC(name, team, dept, tier string) VirtualCluster {
	vc := testVC(name, team, dept, tier)
	vc.ChartVersion, vc.KubernetesVersion = oldChart, "1.30.2"
	return vc
}

func TestNamesAreDistinctLabels(t *testing.T) {
	// The same word at every level must still give three distinct queues.
	vc := testVC("ml", "ml", "ml", TierShared)
	names := map[string]bool{}
	for _, q := range RenderQueues(vc, Settings{}) {
		names[q.GetName()] = true
	}
	if len(names) != 3 {
		t.Fatalf("queue names collide: %v", names)
	}
	long := strings.Repeat("a", 63)
	for _, n := range []string{
		NamespaceName(strings.Repeat("x", 60)), LeafQueueName(strings.Repeat("x", 60)),
		TeamQueueName(long, long), DepartmentQueueName(long),
	} {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("%q: %v", n, errs)
		}
	}
	if TeamQueueName(long, long+"") == TeamQueueName(long, strings.Repeat("a", 62)+"b") {
		t.Error("shortened names must stay distinct")
	}
	bad := testVC(strings.Repeat("x", 61), "t", "d", TierShared)
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "at most 60") {
		t.Errorf("61-character name: %v", err)
	}
	bad = testVC("ok", "Team_A", "d", "GOLD")
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "team") || !strings.Contains(err.Error(), "tier") {
		t.Errorf("bad team and tier: %v", err)
	}
}

func TestRenderQueuesUnitsAndHierarchy(t *testing.T) {
	vc := testVC("ml-dev", "vision", "research", TierShared)
	vc.Leaf.Limit = nil
	qs := RenderQueues(vc, Settings{})
	if len(qs) != 3 {
		t.Fatalf("got %d queues", len(qs))
	}
	want := []struct{ name, parent string }{
		{"dept-research", ""}, {"team-research-vision", "dept-research"}, {"vc-ml-dev", "team-research-vision"},
	}
	for i, w := range want {
		if qs[i].GetName() != w.name {
			t.Errorf("queue %d: name %s, want %s", i, qs[i].GetName(), w.name)
		}
		p, _, _ := unstructured.NestedString(qs[i].Object, "spec", "parentQueue")
		if p != w.parent {
			t.Errorf("%s: parent %q, want %q", w.name, p, w.parent)
		}
		for _, r := range []string{"gpu", "cpu", "memory"} {
			for _, f := range []string{"quota", "overQuotaWeight", "limit"} {
				if _, ok := nestedNumber(qs[i].Object, "spec", "resources", r, f); !ok {
					t.Errorf("%s: resources.%s.%s not written", w.name, r, f)
				}
			}
		}
	}
	leaf := qs[2].Object
	for path, want := range map[string]float64{
		"gpu.quota": 2, "cpu.quota": 16000, "memory.quota": 68719, // 64 GiB = 68719.476736 MB, rounded down
		"gpu.limit": -1, "cpu.limit": -1, "memory.limit": -1,
		"gpu.overQuotaWeight": 1,
	} {
		parts := strings.Split(path, ".")
		got, _ := nestedNumber(leaf, "spec", "resources", parts[0], parts[1])
		if got != want {
			t.Errorf("leaf %s = %v, want %v", path, got, want)
		}
	}
	if p, _ := nestedNumber(leaf, "spec", "priority"); p != 100 {
		t.Errorf("priority 0 must be written as KAI's default 100, got %v", p)
	}
	if p, _ := nestedNumber(qs[1].Object, "spec", "priority"); p != 120 {
		t.Errorf("team priority %v, want 120", p)
	}

	vc.Leaf.Limit = &Quantities{GPUCenti: 150, CPUMillis: -1, MemoryBytes: 1_999_999}
	leaf = RenderQueues(vc, Settings{})[2].Object
	for path, want := range map[string]float64{"gpu.limit": 1.5, "cpu.limit": -1, "memory.limit": 1} {
		parts := strings.Split(path, ".")
		if got, _ := nestedNumber(leaf, "spec", "resources", parts[0], parts[1]); got != want {
			t.Errorf("leaf %s = %v, want %v", path, got, want)
		}
	}
}

func TestRenderGuardrails(t *testing.T) {
	withMAP, withoutMAP := RenderGuardrails(true), RenderGuardrails(false)
	if withMAP.Mutating == nil || withMAP.MutatingBinding == nil {
		t.Fatal("mutating policy missing although supported")
	}
	if withoutMAP.Mutating != nil {
		t.Fatal("mutating policy rendered although unsupported")
	}
	// One program for every virtual cluster: bound by the namespace label,
	// with no virtual cluster's values in it.
	for _, sel := range []map[string]string{withMAP.ValidatingBinding.Spec.MatchResources.NamespaceSelector.MatchLabels,
		withMAP.MutatingBinding.Spec.MatchResources.NamespaceSelector.MatchLabels} {
		if len(sel) != 1 || sel[GuardrailsLabel] != GuardrailsVersion {
			t.Errorf("binding selects %v, want %s=%s", sel, GuardrailsLabel, GuardrailsVersion)
		}
	}
	if *withMAP.Validating.Name != GuardrailsPolicyName || *withMAP.Validating.Spec.FailurePolicy != "Fail" {
		t.Errorf("validating policy %s, failure policy %s", *withMAP.Validating.Name, *withMAP.Validating.Spec.FailurePolicy)
	}

	shared := GuardrailParams(testVC("a", "t", "d", TierShared), Settings{}, true)
	dedicated := GuardrailParams(testVC("b", "t", "d", TierDedicated), Settings{}, false)
	for key, want := range map[string]string{
		paramSharedGPUs: "", paramPinPool: "false", paramPool: "shared", paramQueue: "vc-a", paramLabelKAIPods: "true",
		paramPriorityClasses: "train,build-preemptible", paramSyncer: "system:serviceaccount:vc-a:vc-a",
		paramPoolsMessage: `virtual cluster a (tier SHARED) may only use node pool "shared"`,
	} {
		if shared[key] != want {
			t.Errorf("SHARED parameter %s = %q, want %q", key, shared[key], want)
		}
	}
	for key, want := range map[string]string{
		paramSharedGPUs: "virtual cluster b is in the DEDICATED tier, and KAI does not isolate GPU memory between pods sharing a GPU",
		paramPinPool:    "true", paramPool: "dedicated-t", paramLabelKAIPods: "false",
	} {
		if dedicated[key] != want {
			t.Errorf("DEDICATED parameter %s = %q, want %q", key, dedicated[key], want)
		}
	}
	for _, k := range guardrailParamKeys {
		if _, ok := shared[k]; !ok {
			t.Errorf("parameter %s missing", k)
		}
	}
	if len(shared) != len(guardrailParamKeys) {
		t.Errorf("%d parameters, the program reads %d", len(shared), len(guardrailParamKeys))
	}
	noFractions := testVC("c", "t", "d", TierShared)
	noFractions.AllowFractionalGPUs = false
	if p := GuardrailParams(noFractions, Settings{}, true); p[paramSharedGPUs] != "fractional GPUs are not enabled for virtual cluster c" {
		t.Errorf("SHARED without AllowFractionalGPUs: shared GPUs %q", p[paramSharedGPUs])
	}
	if p := GuardrailParams(noFractions, Settings{}, true); p[paramDigest] == shared[paramDigest] {
		t.Error("different parameters, same digest")
	}

	// Profiles are configuration: a tier that lists a node may preset it,
	// and the Pod Security level follows the profile.
	s := Settings{TierProfiles: map[string]TierProfile{TierShared: {
		PodSecurity: PodSecurityRestricted, PresetNodeNames: []string{"fenced-1"}, FractionalGPUs: true,
	}}}
	if err := s.ValidateProfiles(); err != nil {
		t.Fatal(err)
	}
	fenced := GuardrailParams(testVC("a", "t", "d", TierShared), s, false)
	if m := fenced[paramNodeNameWhy]; !strings.Contains(m, `may only preset node(s) "fenced-1"`) || fenced[paramPresetNodes] != "fenced-1" {
		t.Errorf("preset node rule ignores the profile: %q, presets %q", m, fenced[paramPresetNodes])
	}
	nsa := RenderNamespace(testVC("a", "t", "d", TierShared), s, fenced)
	if lvl := nsa.Labels[PodSecurityEnforceLabel]; lvl != PodSecurityRestricted {
		t.Errorf("namespace enforces %q, want restricted", lvl)
	}
	if nsa.Labels[GuardrailsLabel] != GuardrailsVersion || nsa.Annotations[GuardrailParamPrefix+paramDigest] != fenced[paramDigest] {
		t.Errorf("namespace does not carry the guardrails: labels %v, annotations %v", nsa.Labels, nsa.Annotations)
	}
	ns := RenderNamespace(testVC("b", "t", "d", TierDedicated), s, dedicated).Labels
	if ns[PodSecurityEnforceLabel] != PodSecurityBaseline || ns[KAIQueueLabel] != "vc-b" {
		t.Errorf("namespace labels %v", ns)
	}
	bad := Settings{TierProfiles: map[string]TierProfile{TierDedicated: {
		PodSecurity: "privileged", Preemptibility: []string{"sometimes"}, PriorityClasses: []string{"Not_A_Class"},
	}}}
	err := bad.ValidateProfiles()
	for _, want := range []string{`pod security "privileged"`, `preemptibility "sometimes"`, `priority class "Not_A_Class"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid profile: %v, want it to name %s", err, want)
		}
	}
	// The cluster's own classes pass vCluster's selector: no profile may
	// hand them to tenants.
	err = Settings{TierProfiles: map[string]TierProfile{TierDedicated: {
		PriorityClasses: []string{PriorityInference, "system-node-critical", "system-cluster-critical"},
	}}}.ValidateProfiles()
	for _, want := range []string{`priority class "system-node-critical"`, `priority class "system-cluster-critical"`, "no tenant may use them"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid profile: %v, want it to name %s", err, want)
		}
	}
	if _, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{Settings: bad}); err == nil {
		t.Error("New must refuse an invalid profile")
	}
}

func TestRenderNetworkPolicy(t *testing.T) {
	np := RenderNetworkPolicy(testVC("a", "t", "d", TierShared), Settings{IngressNamespaces: []string{"ingress-nginx"}})
	if *np.Namespace != "vc-a" || len(np.Spec.PolicyTypes) != 1 || string(np.Spec.PolicyTypes[0]) != "Ingress" {
		t.Fatalf("unexpected policy %+v", np)
	}
	from := np.Spec.Ingress[0].From
	if len(from) != 2 || from[0].PodSelector == nil || from[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ingress-nginx" {
		t.Fatalf("unexpected peers %+v", from)
	}
}

func TestRenderVClusterValues(t *testing.T) {
	s := Settings{}
	v := RenderVClusterValues(testVC("ml-dev", "t", "d", TierShared), s)
	sync := nestedMap(t, v, "experimental", "syncSettings")
	if owner, ok := sync["setOwner"]; !ok || owner != false {
		t.Fatalf("setOwner must be written as false, got %v (present %v)", owner, ok)
	}
	if _, ok := sync["syncLabels"]; ok {
		t.Error("syncLabels does not exist from chart 0.21")
	}
	image := nestedMap(t, v, "controlPlane", "statefulSet", "image")
	if got := fmt.Sprintf("%s/%s:%s", image["registry"], image["repository"], image["tag"]); got != "ghcr.io/loft-sh/vcluster-oss:0.36.1" {
		t.Errorf("control plane image %s, want the OSS build of the chart version", got)
	}
	k8s := nestedMap(t, v, "controlPlane", "distro", "k8s")
	if k8s["enabled"] != true || nestedMap(t, k8s, "image")["tag"] != "v1.35.0" {
		t.Errorf("k8s distro %v", k8s)
	}
	for _, removed := range []string{"apiServer", "controllerManager", "scheduler"} {
		if _, ok := k8s[removed]; ok {
			t.Errorf("chart 0.36 has no per-component image key %s", removed)
		}
	}
	pcs := nestedMap(t, v, "sync", "fromHost", "priorityClasses")
	if pcs["enabled"] != true || nestedMap(t, pcs, "selector", "matchLabels")[TenantPriorityClassLabel] != "true" {
		t.Errorf("priority classes sync %v", pcs)
	}
	if _, ok := nestedMap(t, v, "sync")["toHost"]; ok {
		t.Error("shared tier must not pin nodes")
	}
	if got := v["exportKubeConfig"].(map[string]any)["server"]; got != "https://ml-dev.vc-ml-dev.svc" {
		t.Errorf("exportKubeConfig.server = %v", got)
	}
	if sans := nestedMap(t, v, "controlPlane", "proxy")["extraSANs"]; !reflect.DeepEqual(sans, []any{"ml-dev.vc-ml-dev.svc"}) {
		t.Errorf("extraSANs %v", sans)
	}
	quota := nestedMap(t, v, "policies", "resourceQuota", "quota")
	for k, want := range map[string]any{"requests.cpu": "33", "requests.memory": "130Gi", "requests.nvidia.com/gpu": "4"} {
		if quota[k] != want {
			t.Errorf("quota %s = %v, want %v", k, quota[k], want)
		}
	}
	if _, ok := quota["services.nodeports"]; ok {
		t.Error("ClusterIP exposure keeps the chart's node port quota")
	}

	dedicated := RenderVClusterValues(testVC("ml-dev", "t", "d", TierDedicated), s)
	pods := nestedMap(t, dedicated, "sync", "toHost", "pods")
	if tol := pods["enforceTolerations"].([]any); len(tol) != 1 || tol[0] != "gpuplane.io/pool=dedicated-t:NoSchedule" {
		t.Errorf("enforceTolerations = %v", tol)
	}
	if sel := nestedMap(t, dedicated, "sync", "fromHost", "nodes", "selector", "labels"); sel["gpuplane.io/pool"] != "dedicated-t" {
		t.Errorf("node selector = %v", sel)
	}
	if nestedMap(t, dedicated, "sync", "fromHost", "priorityClasses")["enabled"] != true {
		t.Error("DEDICATED lost the priority class sync")
	}

	// Chart 0.20 (virtual clusters created before 0.36 was offered): its
	// own keys, as before.
	v = RenderVClusterValues(oldVC("ml-dev", "t", "d", TierShared), s)
	if labels := nestedMap(t, v, "experimental", "syncSettings")["syncLabels"].([]any); len(labels) != 1 || labels[0] != KAIQueueLabel {
		t.Fatalf("syncLabels = %v", labels)
	}
	k8s = nestedMap(t, v, "controlPlane", "distro", "k8s")
	for _, c := range []string{"apiServer", "controllerManager", "scheduler"} {
		if tag := nestedMap(t, k8s, c, "image")["tag"]; tag != "v1.30.2" {
			t.Errorf("chart 0.20 %s tag %v", c, tag)
		}
	}
	if _, ok := k8s["image"]; ok {
		t.Error("chart 0.20 has no distro.k8s.image")
	}
	if nestedMap(t, v, "controlPlane", "statefulSet", "image")["tag"] != "0.20.0" {
		t.Error("chart 0.20 must run its own control plane image")
	}
	if _, ok := v["sync"]; ok {
		t.Error("chart 0.20 has no sync.fromHost.priorityClasses (and SHARED pins nothing)")
	}
}

// allChartValues renders every combination worth validating against a
// chart's schema.
func allChartValues(chart string) map[string]map[string]any {
	vc := func(name, tier string) VirtualCluster {
		v := testVC(name, "t", "d", tier)
		if chart == oldChart {
			v = oldVC(name, "t", "d", tier)
		}
		return v
	}
	unlimited := vc("free", TierShared)
	unlimited.Leaf.Limit = nil
	unlimited.KubernetesVersion = ""
	oidc := oidcTestSettings()
	noCA := oidcTestSettings()
	noCA.OIDC.CACertPEM = nil
	out := map[string]map[string]any{
		"shared":           RenderVClusterValues(vc("a", TierShared), Settings{IngressNamespaces: []string{"x"}}),
		"dedicated":        RenderVClusterValues(vc("b", TierDedicated), Settings{}),
		"no limit":         RenderVClusterValues(unlimited, Settings{}),
		"oidc":             RenderVClusterValues(vc("c", TierDedicated), oidc),
		"oidc without CA":  RenderVClusterValues(vc("d", TierShared), noCA),
		"oidc, no members": RenderVClusterValues(vc("e", TierShared), Settings{OIDC: OIDCSettings{IssuerURL: "https://idp.example.com"}}),
	}
	for _, e := range testExposures() {
		s := oidc
		s.Exposure = e
		out["exposure "+e.Mode] = RenderVClusterValues(vc("f", TierShared), s)
	}
	out["restricted"] = RenderVClusterValues(vc("g", TierShared), restrictedSettings())
	out["restricted, oidc"] = RenderVClusterValues(vc("h", TierDedicated), withRestricted(oidc, TierDedicated))
	return out
}

// restrictedSettings enforce Pod Security "restricted" on SHARED.
func restrictedSettings() Settings { return withRestricted(Settings{}, TierShared) }

func withRestricted(s Settings, tier string) Settings {
	p := DefaultTierProfiles()[tier]
	p.PodSecurity = PodSecurityRestricted
	s.TierProfiles = map[string]TierProfile{tier: p}
	return s
}

// A "restricted" tier runs the chart-0.36.1 control plane and CoreDNS as
// non-root with the restricted security contexts; chart 0.20 gets none
// (its control plane runs as root; the release step says so), and neither
// does a baseline tier (the chart's defaults).
func TestRestrictedValues(t *testing.T) {
	v := RenderVClusterValues(testVC("r", "t", "d", TierShared), restrictedSettings())
	sec := nestedMap(t, v, "controlPlane", "statefulSet", "security")
	pod, ctr := sec["podSecurityContext"].(map[string]any), sec["containerSecurityContext"].(map[string]any)
	if pod["runAsNonRoot"] != true || pod["fsGroup"] != ControlPlaneUID || nestedMap(t, pod, "seccompProfile")["type"] != "RuntimeDefault" {
		t.Errorf("control plane pod security context %v", pod)
	}
	if ctr["runAsUser"] != ControlPlaneUID || ctr["allowPrivilegeEscalation"] != false ||
		!reflect.DeepEqual(nestedMap(t, ctr, "capabilities")["drop"], []any{"ALL"}) {
		t.Errorf("syncer security context %v", ctr)
	}
	if init := nestedMap(t, v, "controlPlane", "distro", "k8s", "securityContext"); !reflect.DeepEqual(init, ctr) {
		t.Errorf("init container security context %v, want the syncer's %v", init, ctr)
	}
	if dns := nestedMap(t, v, "controlPlane", "coredns", "security", "podSecurityContext", "seccompProfile"); dns["type"] != "RuntimeDefault" {
		t.Errorf("CoreDNS pod seccomp %v", dns)
	}
	for name, other := range map[string]map[string]any{
		"chart 0.20":    RenderVClusterValues(oldVC("r", "t", "d", TierShared), restrictedSettings()),
		"baseline tier": RenderVClusterValues(testVC("r", "t", "d", TierDedicated), restrictedSettings()),
	} {
		cp := nestedMap(t, other, "controlPlane")
		if _, ok := cp["coredns"]; ok {
			t.Errorf("%s: coredns values %v", name, cp["coredns"])
		}
		if _, ok := nestedMap(t, cp, "statefulSet")["security"]; ok {
			t.Errorf("%s: control plane security values", name)
		}
	}
}

func testExposures() []Exposure {
	return []Exposure{
		{Mode: ExposeLoadBalancer, Annotations: map[string]string{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}},
		{Mode: ExposeNodePort, Host: "nodes.gpu.example.com"},
		{Mode: ExposeIngress, Host: "{name}.vc.example.com", IngressClassName: "nginx"},
	}
}

func TestValuesMatchChartSchema(t *testing.T) {
	for _, chart := range []string{newChart, oldChart} {
		dir, err := vclusterchart.Dir(context.Background(), chart)
		if err != nil {
			t.Fatal(err)
		}
		for name, values := range allChartValues(chart) {
			if err := ValidateValues(dir, values); err != nil {
				t.Errorf("chart %s, %s: %v", chart, name, err)
			}
		}
	}

	dir, err := vclusterchart.Dir(context.Background(), newChart)
	if err != nil {
		t.Fatal(err)
	}
	bad := RenderVClusterValues(testVC("a", "t", "d", TierShared), Settings{})
	bad["experimental"].(map[string]any)["syncSettings"].(map[string]any)["setOwner"] = "no"
	bad["controlPlane"].(map[string]any)["statefulSet"].(map[string]any)["replicas"] = 2
	err = ValidateValues(dir, bad)
	var ve *ValuesError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValuesError, got %v", err)
	}
	for _, want := range []string{"/experimental/syncSettings/setOwner", "replicas"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q:\n%v", want, err)
		}
	}
	t.Logf("schema error reads: %v", err)

	// The 0.20 values are not valid for 0.36 (the per-component image keys
	// were removed in 0.25): the chart version selects the schema.
	if err := ValidateValues(dir, RenderVClusterValues(oldVC("a", "t", "d", TierShared), Settings{})); err == nil ||
		!strings.Contains(err.Error(), "apiServer") {
		t.Errorf("0.20 values against the 0.36 schema: %v", err)
	}
}

func TestParseAllocated(t *testing.T) {
	q := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"allocated": map[string]any{
		"nvidia.com/gpu": "1500m", "cpu": "2500m", "memory": "64Gi", "pods": "3",
	}}}}
	got := parseAllocated(q)
	want := Quantities{GPUCenti: 150, CPUMillis: 2500, MemoryBytes: 64 * gib}
	if got == nil || *got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if parseAllocated(&unstructured.Unstructured{Object: map[string]any{}}) != nil {
		t.Error("no status must give nil")
	}
}

// Allocations read from KAI round up (quota.AllocatedFromKAI): a GPU share
// of 1.505 devices is 151 hundredths, never 150.
func TestParseAllocatedRoundsUp(t *testing.T) {
	q := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"allocated": map[string]any{
		"nvidia.com/gpu": "1505m", "cpu": "0.0005", "memory": "1500k",
	}}}}
	got := parseAllocated(q)
	want := Quantities{GPUCenti: 151, CPUMillis: 1, MemoryBytes: 1_500_000}
	if got == nil || *got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// JSON numbers arrive as float64 or int64; read exactly, then rounded up
	// (0.29 devices is 29 hundredths, not 30 from float noise).
	q = &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"allocated": map[string]any{
		"nvidia.com/gpu": 0.29, "cpu": 0.0011, "memory": int64(2_000_001),
	}}}}
	got = parseAllocated(q)
	want = Quantities{GPUCenti: 29, CPUMillis: 2, MemoryBytes: 2_000_001}
	if got == nil || *got != want {
		t.Fatalf("numbers: got %+v, want %+v", got, want)
	}
}
