package hostcluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The SANDBOX tier on the real API server: the virtual cluster runs its
// own scheduler over a fenced slice of nodes (its pool). A pod that
// scheduler bound to a node of the slice arrives with spec.nodeName set
// and without KAI, and is admitted; every way out of the slice is
// refused. Pods are written as the syncer writes them, impersonating its
// ServiceAccount (see TestHostileTenants).
func TestHostileSandbox(t *testing.T) {
	h := newHarness(t)
	createKAIPriorityClasses(t, h)
	dept := h.n("sandbox")
	vc := testVC(h.n("hs-sandbox"), h.n("team-sb"), dept, TierSandbox)
	inSlice, outside, foreign := h.n("sb-node-1"), h.n("shared-node-1"), h.n("ded-node-1")
	for name, pool := range map[string]string{inSlice: vc.Pool, outside: DefaultPool, foreign: foreignPool} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{DefaultPoolLabel: pool}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{NvidiaGPUResource: resource.MustParse("8")}}}
		if _, err := h.kube.CoreV1().Nodes().Create(h.ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if _, err := h.client.Apply(h.ctx, vc); err != nil {
		t.Fatalf("apply the sandbox virtual cluster: %v", err)
	}
	h.markQuotaObserved(vc)
	syncer := h.impersonateSyncer(vc)
	values := RenderVClusterValues(vc, h.client.settings)
	e := hostileEnv{vc: vc, ownPool: vc.pool(), ownQueue: LeafQueueName(vc.Name), values: values}

	// The chart runs a scheduler inside and syncs only the slice's nodes.
	if on, _, _ := unstructured.NestedBool(values, "controlPlane", "distro", "k8s", "scheduler", "enabled"); !on {
		t.Errorf("sandbox values do not enable the virtual scheduler: %v", values["controlPlane"])
	}
	if sel, _, _ := unstructured.NestedString(values, "sync", "fromHost", "nodes", "selector", "labels", DefaultPoolLabel); sel != vc.Pool {
		t.Errorf("sandbox values sync nodes of pool %q, want %q", sel, vc.Pool)
	}

	// On chart 0.20 the virtual scheduler has its older switch; the chart
	// (strict schema) installs with it.
	old := oldVC(h.n("hs-sandbox-old"), h.n("team-sbo"), dept, TierSandbox)
	old.Pool = vc.Pool + "-old"
	if _, err := h.client.Apply(h.ctx, old); err != nil {
		t.Fatalf("apply a sandbox virtual cluster on chart %s: %v", oldChart, err)
	}
	if on, _, _ := unstructured.NestedBool(RenderVClusterValues(old, h.client.settings), "controlPlane", "advanced", "virtualScheduler", "enabled"); !on {
		t.Error("chart-0.20 sandbox values do not enable the virtual scheduler")
	}

	boundTo := func(node string) func(e hostileEnv, p *corev1.Pod) {
		return func(e hostileEnv, p *corev1.Pod) {
			gpuContainer("1")(e, p)
			p.Spec.NodeName = node // the virtual scheduler's binding, synced down
		}
	}
	for _, tc := range []hostileCase{
		{name: "bound by its own scheduler to a node of its slice", kind: wPod, virtual: boundTo(inSlice),
			want: same(admit)},
		{name: "bound by its own scheduler to a node of its slice, as a Job", kind: wJob, virtual: boundTo(inSlice),
			want: same(admit)},
		{name: "a KAI pod in its own queue on its slice", kind: wPod, virtual: kaiGPU("1"), want: same(admit)},
		{name: "GPU pod bound to a node outside the slice (shared pool)", kind: wPod, virtual: boundTo(outside),
			want: same(deny("may only name a node of its slice"))},
		{name: "GPU pod bound to a node of another team's pool", kind: wPod, virtual: boundTo(foreign),
			want: same(deny("may only name a node of its slice"))},
		{name: "CPU pod bound to a node outside the slice", kind: wPod,
			virtual: func(e hostileEnv, p *corev1.Pod) { p.Spec.NodeName = outside },
			want:    same(deny("may only preset those"))},
		{name: "GPU pod left to the host's default scheduler", kind: wPod, virtual: gpuContainer("1"),
			want: same(deny("must set spec.schedulerName: " + KAISchedulerName))},
		{name: "another team's queue", kind: wPod, virtual: kaiGPU("1", label(KAIQueueLabel, foreignQueue)),
			want: same(deny("the queue of virtual cluster"))},
		{name: "selects another team's pool", kind: wPod, virtual: kaiGPU("1", selectPool(foreignPool)), noPin: true,
			want: same(deny("may only use node pool"))},
		{name: "tolerates another team's pool taint", kind: wPod,
			virtual: kaiGPU("1", tolerate(DefaultPoolLabel, corev1.TolerationOpEqual, foreignPool, corev1.TaintEffectNoSchedule)),
			want:    same(deny("is refused"))},
		{name: "shared GPU (gpu-fraction)", kind: wPod, virtual: kaiGPU("0", annotate(KAIFractionAnnot, "0.5")),
			want: same(deny("KAI does not isolate GPU memory"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runHostileCase(h, syncer, e, tc)
			checkVerdict(t, e, tc.want[tShared], got, err)
		})
	}
}
