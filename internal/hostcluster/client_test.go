package hostcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

func TestApplyCreatesEverything(t *testing.T) {
	h := newHarness(t)
	name := h.n("create")
	vc := testVC(name, "vision", "research", TierShared)
	ns := NamespaceName(name)
	steps := h.apply(vc)
	var names []Step
	for _, s := range steps {
		names = append(names, s.Step)
		t.Logf("%s: %s", s.Step, s.Detail)
	}
	if !slices.Equal(names, []Step{StepNamespace, StepQueues, StepGuardrails, StepNetworkPolicy, StepRelease, StepTenantAccess}) {
		t.Fatalf("steps %v", names)
	}

	nsObj, err := h.kube.CoreV1().Namespaces().Get(h.ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels[LabelTier] != TierShared || nsObj.Labels[LabelVirtualCluster] != name ||
		nsObj.Labels[KAIQueueLabel] != LeafQueueName(name) || nsObj.Labels[PodSecurityEnforceLabel] != PodSecurityBaseline {
		t.Errorf("namespace labels %v", nsObj.Labels)
	}

	// 2 GPUs, 16000 millicores, 64 GiB = 68719 MB (10^6 bytes, rounded down).
	leaf, err := h.queue(LeafQueueName(name))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]float64{
		"gpu.quota": 2, "cpu.quota": 16000, "memory.quota": 68719,
		"gpu.limit": 4, "cpu.limit": 32000, "memory.limit": 137438,
		"gpu.overQuotaWeight": 1, "cpu.overQuotaWeight": 1, "memory.overQuotaWeight": 1,
	} {
		p := strings.Split(path, ".")
		if got, ok := nestedNumber(leaf, "spec", "resources", p[0], p[1]); !ok || got != want {
			t.Errorf("leaf %s = %v (present %v), want %v", path, got, ok, want)
		}
	}
	for name, parent := range map[string]string{
		LeafQueueName(name): "team-research-vision", "team-research-vision": "dept-research", "dept-research": "",
	} {
		q, err := h.queue(name)
		if err != nil {
			t.Fatalf("queue %s: %v", name, err)
		}
		if got, _, _ := unstructured.NestedString(q, "spec", "parentQueue"); got != parent {
			t.Errorf("%s parent %q, want %q", name, got, parent)
		}
	}

	// The shared guardrails, with this virtual cluster's parameters on its
	// namespace, and no admission object of its own.
	adm := h.kube.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Get(h.ctx, GuardrailsPolicyName, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Get(h.ctx, GuardrailsPolicyName, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := adm.MutatingAdmissionPolicies().Get(h.ctx, GuardrailsPolicyName, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Get(h.ctx, GuardrailsPolicyName, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := adm.ValidatingAdmissionPolicies().Get(h.ctx, PolicyName(name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a validating policy of its own: %v", err)
	}
	if nsObj.Labels[GuardrailsLabel] != GuardrailsVersion {
		t.Errorf("namespace not bound to the guardrails: %v", nsObj.Labels)
	}
	for k, v := range GuardrailParams(vc, h.client.settings, true) {
		if got := nsObj.Annotations[GuardrailParamPrefix+k]; got != v {
			t.Errorf("namespace parameter %s = %q, want %q", k, got, v)
		}
	}
	if _, err := h.kube.NetworkingV1().NetworkPolicies(ns).Get(h.ctx, NetworkPolicyName, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := h.kube.CoreV1().Secrets(ns).Get(h.ctx, "sh.helm.release.v1."+name+".v1", metav1.GetOptions{}); err != nil {
		t.Errorf("Helm release secret: %v", err)
	}
	sts, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("control plane StatefulSet: %v", err)
	}
	if img := sts.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/loft-sh/vcluster-oss:"+newChart {
		t.Errorf("control plane image %s", img)
	}
	rq, err := h.kube.CoreV1().ResourceQuotas(ns).Get(h.ctx, "vc-"+name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gpu := rq.Spec.Hard["requests.nvidia.com/gpu"]; gpu.Value() != 4 {
		t.Errorf("ResourceQuota GPUs %s, want 4 (the leaf limit)", gpu.String())
	}
	if _, capped := rq.Spec.Hard[corev1.ResourceLimitsMemory]; capped {
		t.Error("limits.memory should not be capped")
	}

	// The chart's values reached the vCluster config secret exactly.
	cfgSecret, err := h.kube.CoreV1().Secrets(ns).Get(h.ctx, "vc-config-"+name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config := string(cfgSecret.Data["config.yaml"])
	for _, want := range []string{"setOwner: false", "tag: v1.35.0", TenantPriorityClassLabel + `: "true"`, "server: https://" + name + "." + ns + ".svc"} {
		if !strings.Contains(config, want) {
			t.Errorf("vCluster config lacks %q", want)
		}
	}

	o, err := h.client.Observe(h.ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	if !o.NamespaceExists || !o.QueuesInSync() || !o.GuardrailsPresent || !o.NetworkPolicyPresent || !o.ReleaseDeployed() || !o.ReleaseUpToDate {
		t.Errorf("observed after apply: %+v", o)
	}
	if len(o.GuardrailWarnings) > 0 {
		t.Errorf("CEL type-check warnings: %v", o.GuardrailWarnings)
	}
}

// snapshot maps every object Apply owns to its resourceVersion.
func (h *harness) snapshot(vc VirtualCluster) map[string]string {
	h.t.Helper()
	out := map[string]string{}
	ns := NamespaceName(vc.Name)
	add := func(key string, obj metav1.Object, err error) {
		if err != nil {
			h.t.Fatalf("%s: %v", key, err)
		}
		out[key] = obj.GetResourceVersion()
	}
	n, err := h.kube.CoreV1().Namespaces().Get(h.ctx, ns, metav1.GetOptions{})
	add("namespace", n, err)
	for _, q := range RenderQueues(vc, Settings{}) {
		u, err := h.dyn.Resource(QueueGVR).Get(h.ctx, q.GetName(), metav1.GetOptions{})
		add("queue/"+q.GetName(), u, err)
	}
	adm := h.kube.AdmissionregistrationV1()
	p := GuardrailsPolicyName
	vap, err := adm.ValidatingAdmissionPolicies().Get(h.ctx, p, metav1.GetOptions{})
	add("vap", vap, err)
	vapb, err := adm.ValidatingAdmissionPolicyBindings().Get(h.ctx, p, metav1.GetOptions{})
	add("vapb", vapb, err)
	mp, err := adm.MutatingAdmissionPolicies().Get(h.ctx, p, metav1.GetOptions{})
	add("map", mp, err)
	mpb, err := adm.MutatingAdmissionPolicyBindings().Get(h.ctx, p, metav1.GetOptions{})
	add("mapb", mpb, err)
	np, err := h.kube.NetworkingV1().NetworkPolicies(ns).Get(h.ctx, NetworkPolicyName, metav1.GetOptions{})
	add("networkpolicy", np, err)
	sts, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, ReleaseName(vc.Name), metav1.GetOptions{})
	add("statefulset", sts, err)
	secrets, err := h.kube.CoreV1().Secrets(ns).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, s := range secrets.Items {
		out["secret/"+s.Name] = s.ResourceVersion
	}
	return out
}

func TestApplyTwiceIsIdempotent(t *testing.T) {
	h := newHarness(t)
	vc := testVC(h.n("twice"), "vision", "research", TierDedicated)
	h.apply(vc)
	before := h.snapshot(vc)
	steps := h.apply(vc)
	after := h.snapshot(vc)
	for k, rv := range before {
		if after[k] != rv {
			t.Errorf("%s changed: resourceVersion %s -> %s", k, rv, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("objects appeared: %d -> %d", len(before), len(after))
	}
	if r, _ := steps.Of(StepRelease); !strings.Contains(r.Detail, "unchanged") {
		d := r.Detail
		t.Errorf("release step on re-apply: %q", d)
	}

	// A real change upgrades the release and touches only what changed.
	vc.Leaf.Limit.GPUCenti = 600
	vc.Generation++
	steps = h.apply(vc)
	if r, _ := steps.Of(StepRelease); !strings.Contains(r.Detail, "upgraded (revision 2)") {
		d := r.Detail
		t.Errorf("release step after change: %q", d)
	}
	rq, err := h.kube.CoreV1().ResourceQuotas(NamespaceName(vc.Name)).Get(h.ctx, "vc-"+vc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gpu := rq.Spec.Hard["requests.nvidia.com/gpu"]; gpu.Value() != 6 {
		t.Errorf("ResourceQuota GPUs %s after upgrade, want 6", gpu.String())
	}
	third := h.snapshot(vc)
	for _, parent := range []string{"queue/dept-research", "queue/team-research-vision"} {
		if third[parent] != before[parent] {
			t.Errorf("%s changed although its spec did not", parent)
		}
	}
	if third["queue/"+LeafQueueName(vc.Name)] == before["queue/"+LeafQueueName(vc.Name)] {
		t.Error("leaf queue should have changed")
	}
}

func TestGuardrailsOnTheRealAPIServer(t *testing.T) {
	h := newHarness(t)
	shared := testVC(h.n("gr-shared"), "team-a", "research", TierShared)
	dedicated := testVC(h.n("gr-dedicated"), "team-a", "research", TierDedicated)
	other := testVC(h.n("gr-other"), "team-b", "research", TierShared)
	for _, vc := range []VirtualCluster{shared, dedicated, other} {
		h.apply(vc)
		h.markQuotaObserved(vc)
	}
	leaf := LeafQueueName(shared.Name)

	_, err := h.createPod(shared, gpus("1"), kai, queueLabel(LeafQueueName(other.Name)))
	mustBeDenied(t, "GPU pod naming team-b's queue", err, `must be "`+leaf+`"`, `got "`+LeafQueueName(other.Name)+`"`)

	_, err = h.createPod(shared, gpus("1"), queueLabel(leaf))
	mustBeDenied(t, "GPU pod without schedulerName", err, "schedulerName: kai-scheduler", `got "default-scheduler"`)

	_, err = h.createPod(shared, kai, queueLabel(leaf), func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{NvidiaGPUResource: resource.MustParse("1")},
			Limits:   corev1.ResourceList{NvidiaGPUResource: resource.MustParse("1")},
		}}}
		p.Spec.SchedulerName = "default-scheduler"
	})
	mustBeDenied(t, "GPU in an init container without kai-scheduler", err, "schedulerName")

	_, err = h.createPod(shared, annotation(KAIFractionAnnot, "0.5"))
	mustBeDenied(t, "fractional pod without kai-scheduler", err, "schedulerName")

	// No label: the mutating policy puts the pod in its own leaf queue
	// instead of KAI's default-queue.
	p, err := h.createPod(shared, gpus("1"), kai)
	if err != nil {
		t.Fatalf("GPU pod without queue label: %v", err)
	}
	if got := p.Labels[KAIQueueLabel]; got != leaf {
		t.Errorf("queue label set to %q, want %q", got, leaf)
	}
	if p.Labels[vclusterMarkerLabel] != shared.Name {
		t.Errorf("mutation dropped the pod's other labels: %v", p.Labels)
	}
	p, err = h.createPod(shared, gpus("2"), kai, queueLabel(leaf))
	if err != nil {
		t.Fatalf("GPU pod in its own queue: %v", err)
	}
	// The label cannot be moved to another queue afterwards.
	p.Labels[KAIQueueLabel] = LeafQueueName(other.Name)
	_, err = h.kube.CoreV1().Pods(p.Namespace).Update(h.ctx, p, metav1.UpdateOptions{})
	mustBeDenied(t, "relabelling a pod to another queue", err, LeafQueueName(other.Name))

	// Non-GPU pods are untouched.
	p, err = h.createPod(shared)
	if err != nil {
		t.Fatalf("plain pod: %v", err)
	}
	if _, ok := p.Labels[KAIQueueLabel]; ok {
		t.Error("plain pod must not be given a queue")
	}
	_, err = h.createPod(shared, queueLabel("default-queue"))
	mustBeDenied(t, "CPU pod naming default-queue", err, "default-queue")

	// Fractions: accepted in SHARED, refused in DEDICATED.
	p, err = h.createPod(shared, kai, annotation(KAIFractionAnnot, "0.5"))
	if err != nil {
		t.Fatalf("fractional pod in SHARED tier: %v", err)
	}
	if p.Labels[KAIQueueLabel] != leaf {
		t.Errorf("fractional pod queue %q", p.Labels[KAIQueueLabel])
	}
	_, err = h.createPod(dedicated, kai, annotation(KAIFractionAnnot, "0.5"))
	mustBeDenied(t, "gpu-fraction in DEDICATED tier", err, "DEDICATED", "gpu-fraction")
	_, err = h.createPod(dedicated, kai, annotation(KAIGPUMemoryAnnot, "2000"))
	mustBeDenied(t, "gpu-memory in DEDICATED tier", err, "DEDICATED")
	if _, err = h.createPod(dedicated, kai, gpus("1")); err != nil {
		t.Errorf("whole GPU in DEDICATED tier: %v", err)
	}

	// The policies of one namespace do not leak into another.
	if _, err := h.createPod(other, gpus("1"), kai, queueLabel(LeafQueueName(other.Name))); err != nil {
		t.Errorf("team-b pod in its own namespace: %v", err)
	}
}

func TestDriftIsObservedAndRepaired(t *testing.T) {
	h := newHarness(t)
	vc := testVC(h.n("drift"), "vision", "research", TierShared)
	h.apply(vc)

	// Someone edits the leaf quota by hand (a different field manager, as
	// kubectl edit would).
	patch := []byte(`{"spec":{"resources":{"gpu":{"quota":8}},"priority":1}}`)
	if _, err := h.dyn.Resource(QueueGVR).Patch(h.ctx, LeafQueueName(vc.Name), types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	h.sync()
	o, err := h.client.Observe(h.ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	if o.QueuesInSync() {
		t.Fatal("drift not detected")
	}
	leaf := o.Queues[2]
	if leaf.Name != LeafQueueName(vc.Name) || leaf.InSync() {
		t.Fatalf("leaf state %+v", leaf)
	}
	joined := strings.Join(leaf.Drift, "; ")
	for _, want := range []string{"resources.gpu.quota: want 2, have 8", "priority: want 100, have 1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("drift %q lacks %q", joined, want)
		}
	}

	h.apply(vc)
	o, err = h.client.Observe(h.ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	if !o.QueuesInSync() {
		t.Fatalf("drift not repaired: %+v", o.Queues)
	}
	q, _ := h.queue(LeafQueueName(vc.Name))
	if got, _ := nestedNumber(q, "spec", "resources", "gpu", "quota"); got != 2 {
		t.Errorf("gpu quota %v after repair", got)
	}
}

func TestObserveReadinessAndAllocation(t *testing.T) {
	h := newHarness(t)
	vc := testVC(h.n("observe"), "vision", "research", TierShared)
	empty, err := h.client.Observe(h.ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	if empty.NamespaceExists || empty.Release != nil || empty.GuardrailsPresent || empty.Ready() {
		t.Fatalf("observed before apply: %+v", empty)
	}
	h.apply(vc)
	o, err := h.client.Observe(h.ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	if o.ControlPlaneReady || o.KubeconfigSecretPresent || o.Ready() || o.Allocated != nil {
		t.Fatalf("no kubelet here: control plane cannot be ready yet: %+v", o)
	}

	// Play the parts of kubelet, vCluster and KAI.
	ns := NamespaceName(vc.Name)
	sts, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, vc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sts.Status = appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if _, err := h.kube.AppsV1().StatefulSets(ns).UpdateStatus(h.ctx, sts, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.kube.CoreV1().Secrets(ns).Create(h.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: KubeconfigSecretName(vc.Name)},
		Data:       map[string][]byte{"config": []byte("apiVersion: v1\nkind: Config\n")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leaf, err := h.dyn.Resource(QueueGVR).Get(h.ctx, LeafQueueName(vc.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedStringMap(leaf.Object, map[string]string{
		"nvidia.com/gpu": "1500m", "cpu": "6", "memory": "24Gi",
	}, "status", "allocated")
	if _, err := h.dyn.Resource(QueueGVR).UpdateStatus(h.ctx, leaf, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync()

	o, err = h.client.Observe(h.ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Ready() {
		t.Fatalf("should be ready: %+v", o)
	}
	want := Quantities{GPUCenti: 150, CPUMillis: 6000, MemoryBytes: 24 << 30}
	if o.Allocated == nil || *o.Allocated != want {
		t.Errorf("allocated %+v, want %+v", o.Allocated, want)
	}
}

func TestDeleteLeavesNothingBehind(t *testing.T) {
	h := newHarness(t)
	vc := testVC(h.n("gone"), "vision", h.n("delete-dept"), TierDedicated) // dedicated: the chart adds cluster RBAC for node sync
	h.apply(vc)
	ns := NamespaceName(vc.Name)
	crs, err := h.kube.RbacV1().ClusterRoles().List(h.ctx, metav1.ListOptions{LabelSelector: "release=" + vc.Name})
	if err != nil || len(crs.Items) == 0 {
		t.Fatalf("expected the chart's ClusterRole for node sync (%v)", err)
	}

	if err := h.client.Delete(h.ctx, vc); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Delete(h.ctx, vc); err != nil {
		t.Fatalf("second delete must be a no-op: %v", err)
	}

	notFound := func(what string, err error) {
		t.Helper()
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s still there (err %v)", what, err)
		}
	}
	for _, q := range RenderQueues(vc, Settings{}) {
		_, err := h.queue(q.GetName())
		notFound("queue "+q.GetName(), err)
	}
	adm := h.kube.AdmissionregistrationV1()
	p := PolicyName(vc.Name)
	_, err = adm.ValidatingAdmissionPolicies().Get(h.ctx, p, metav1.GetOptions{})
	notFound("validating policy", err)
	_, err = adm.ValidatingAdmissionPolicyBindings().Get(h.ctx, p, metav1.GetOptions{})
	notFound("validating binding", err)
	_, err = adm.MutatingAdmissionPolicies().Get(h.ctx, p, metav1.GetOptions{})
	notFound("mutating policy", err)
	_, err = adm.MutatingAdmissionPolicyBindings().Get(h.ctx, p, metav1.GetOptions{})
	notFound("mutating binding", err)
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	} {
		list, err := h.dyn.Resource(gvr).List(h.ctx, metav1.ListOptions{LabelSelector: "release=" + vc.Name})
		if err != nil || len(list.Items) > 0 {
			t.Errorf("%s left: %d (%v)", gvr.Resource, len(list.Items), err)
		}
	}
	// Every namespaced kind Apply or the chart creates. (Without
	// kube-controller-manager the namespace itself stays Terminating, so
	// its contents are checked one by one.)
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "services"}, {Version: "v1", Resource: "serviceaccounts"},
		{Version: "v1", Resource: "resourcequotas"}, {Version: "v1", Resource: "limitranges"},
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "persistentvolumeclaims"},
		{Group: "apps", Version: "v1", Resource: "statefulsets"}, {Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
		{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
	} {
		list, err := h.dyn.Resource(gvr).Namespace(ns).List(h.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) > 0 {
			var names []string
			for _, o := range list.Items {
				names = append(names, o.GetName())
			}
			t.Errorf("%s left in %s: %v", gvr.Resource, ns, names)
		}
	}
	n, err := h.kube.CoreV1().Namespaces().Get(h.ctx, ns, metav1.GetOptions{})
	if err == nil && n.DeletionTimestamp == nil {
		t.Error("namespace not being deleted")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}

	// Re-creating while the namespace terminates is refused with a reason.
	if _, err := h.client.Apply(h.ctx, vc); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("apply into a terminating namespace: %v", err)
	}
}

func TestDeleteKeepsSharedParents(t *testing.T) {
	h := newHarness(t)
	dept := h.n("shared-dept")
	a := testVC(h.n("share-a"), "t1", dept, TierShared)
	b := testVC(h.n("share-b"), "t1", dept, TierShared)
	c := testVC(h.n("share-c"), "t2", dept, TierShared)
	t1, t2, d := TeamQueueName(dept, "t1"), TeamQueueName(dept, "t2"), DepartmentQueueName(dept)
	for _, vc := range []VirtualCluster{a, b, c} {
		h.apply(vc)
	}
	exists := func(name string) bool {
		_, err := h.queue(name)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	check := func(when string, want map[string]bool) {
		t.Helper()
		for q, w := range want {
			if got := exists(q); got != w {
				t.Errorf("%s: queue %s exists=%v, want %v", when, q, got, w)
			}
		}
	}
	if err := h.client.Delete(h.ctx, a); err != nil {
		t.Fatal(err)
	}
	check("after deleting a", map[string]bool{
		LeafQueueName(a.Name): false, LeafQueueName(b.Name): true, t1: true, d: true,
	})
	if err := h.client.Delete(h.ctx, b); err != nil {
		t.Fatal(err)
	}
	check("after deleting b", map[string]bool{
		LeafQueueName(b.Name): false, t1: false, t2: true, d: true,
	})
	if err := h.client.Delete(h.ctx, c); err != nil {
		t.Fatal(err)
	}
	check("after deleting c", map[string]bool{t2: false, d: false})
}

func TestCapacityByPool(t *testing.T) {
	h := newHarness(t)
	node := func(name, pool string, gpu, cpu, mem string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if pool != "" {
			n.Labels[DefaultPoolLabel] = pool
		}
		created, err := h.kube.CoreV1().Nodes().Create(h.ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Allocatable = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
		}
		if gpu != "" {
			created.Status.Allocatable[NvidiaGPUResource] = resource.MustParse(gpu)
		}
		if _, err := h.kube.CoreV1().Nodes().UpdateStatus(h.ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.kube.CoreV1().Nodes().Delete(h.ctx, name, metav1.DeleteOptions{}) })
	}
	node("gpu-1", "", "8", "64", "512Gi")
	node("gpu-2", "shared", "8", "63500m", "512Gi")
	node("cpu-1", "", "", "32", "128Gi")
	node("ded-1", "dedicated", "4", "32", "256Gi")

	got, err := h.client.Capacity(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Quantities{
		"shared":    {GPUCenti: 1600, CPUMillis: 64000 + 63500 + 32000, MemoryBytes: (512 + 512 + 128) << 30},
		"dedicated": {GPUCenti: 400, CPUMillis: 32000, MemoryBytes: 256 << 30},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("capacity %+v, want %+v", got, want)
	}
}

// On servers without MutatingAdmissionPolicy (before 1.36, or disabled)
// nothing sets the queue label, so the validating policy alone must keep
// KAI pods out of default-queue; and nothing reads or watches the mutating
// kinds there (a watch of them would fail every Apply). A real API server
// of its own, with those resources turned off.
func TestGuardrailsWithoutMutatingAdmissionPolicy(t *testing.T) {
	envtestenv.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := envtestenv.Start(ctx, envtestenv.Options{ExtraAPIServerArgs: []string{
		"--runtime-config=admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false," +
			"admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false",
		// Its admission plugin would wait for the resources forever.
		"--disable-admission-plugins=MutatingAdmissionPolicy"}})
	if err != nil {
		t.Fatalf("real API server needed: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	h := newHarnessOn(t, env)
	if ok, err := h.client.MutatingAdmissionPolicySupported(); err != nil || ok {
		t.Fatalf("MutatingAdmissionPolicy served: %v (%v)", ok, err)
	}
	vc := testVC(h.n("no-map"), "team-a", "research", TierShared)
	steps := h.apply(vc)
	if d := steps[2].Detail; !strings.Contains(d, "no MutatingAdmissionPolicy") {
		t.Errorf("guardrails step detail %q", d)
	}
	// This namespace tells the (absent) mutating policy not to label pods.
	ns, err := h.kube.CoreV1().Namespaces().Get(h.ctx, NamespaceName(vc.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Annotations[GuardrailParamPrefix+paramLabelKAIPods]; got != "false" {
		t.Fatalf("namespace parameter %s = %q, want false", paramLabelKAIPods, got)
	}
	h.markQuotaObserved(vc)
	_, err = h.createPod(vc, gpus("1"), kai)
	mustBeDenied(t, "KAI pod without queue label", err, "must carry label kai.scheduler/queue="+LeafQueueName(vc.Name), "default-queue")
	if _, err := h.createPod(vc, gpus("1"), kai, queueLabel(LeafQueueName(vc.Name))); err != nil {
		t.Errorf("labelled KAI pod: %v", err)
	}
	h.sync() // the mutating kinds' watches fail here; Sync must not wait for them
	o, err := h.client.Observe(h.ctx, vc)
	if err != nil || !o.GuardrailsPresent {
		t.Errorf("guardrails present %v (%v)", o.GuardrailsPresent, err)
	}
}

// KAI's webhook refuses deleting a queue whose status still lists children;
// when its status lags behind, Delete reports pending instead of failing.
// A ValidatingAdmissionPolicy stands in for the webhook here.
func TestDeleteWaitsWhenAdmissionRefusesAParent(t *testing.T) {
	h := newHarness(t)
	dept := h.n("kai-webhook")
	vc := testVC(h.n("kw"), "t1", dept, TierShared)
	h.apply(vc)
	team := TeamQueueName(dept, "t1")
	name := "kai-standin-" + dept
	adm := h.kube.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(h.ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				ResourceNames: []string{team},
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Delete},
					Rule: admissionv1.Rule{APIGroups: []string{QueueGVR.Group}, APIVersions: []string{QueueGVR.Version}, Resources: []string{"queues"}}},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "queue still has child queues"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(h.ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ { // admission policies load asynchronously: probe with dry runs
		err := h.dyn.Resource(QueueGVR).Delete(h.ctx, team, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			break
		}
		if i == 100 {
			t.Fatal("stand-in policy never took effect")
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := h.client.Delete(h.ctx, vc)
	var pending *DeletePendingError
	if !errors.As(err, &pending) || !strings.Contains(err.Error(), "queue still has child queues") {
		t.Fatalf("delete: %v, want pending naming the refusal", err)
	}
	if _, err := h.queue(team); err != nil {
		t.Errorf("team queue must remain while refused: %v", err)
	}
	if err := adm.ValidatingAdmissionPolicyBindings().Delete(h.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err = h.client.Delete(h.ctx, vc); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("delete after the refusal ended: %v", err)
	}
	for _, q := range []string{team, DepartmentQueueName(dept)} {
		if _, err := h.queue(q); !apierrors.IsNotFound(err) {
			t.Errorf("queue %s: %v, want gone", q, err)
		}
	}
	_ = adm.ValidatingAdmissionPolicies().Delete(h.ctx, name, metav1.DeleteOptions{})
}

// With KAI node pools every pool is its own scheduling shard: queues and
// KAI pods carry the pool in KAI's node-pool label, and a DEDICATED team's
// queue is the root of its pool's hierarchy, so fair share stays inside
// the pool.
func TestKAINodePools(t *testing.T) {
	h := newHarness(t)
	const key = "kai.scheduler/node-pool"
	s := h.client.settings
	s.KAINodePoolLabel = key
	c, err := New(h.config, Options{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dept := h.n("kai-pools")
	shared := testVC(h.n("kp-shared"), "t1", dept, TierShared)
	dedicated := testVC(h.n("kp-ded"), "t2", dept, TierDedicated)
	for _, vc := range []VirtualCluster{shared, dedicated} {
		if _, err := c.Apply(h.ctx, vc); err != nil {
			t.Fatal(err)
		}
		h.markQuotaObserved(vc)
	}
	for name, want := range map[string]struct{ pool, parent string }{
		DepartmentQueueName(dept):     {DefaultPool, ""},
		TeamQueueName(dept, "t1"):     {DefaultPool, DepartmentQueueName(dept)},
		LeafQueueName(shared.Name):    {DefaultPool, TeamQueueName(dept, "t1")},
		TeamQueueName(dept, "t2"):     {"dedicated-t2", ""},
		LeafQueueName(dedicated.Name): {"dedicated-t2", TeamQueueName(dept, "t2")},
	} {
		q, err := h.dyn.Resource(QueueGVR).Get(h.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		parent, _, _ := unstructured.NestedString(q.Object, "spec", "parentQueue")
		if q.GetLabels()[key] != want.pool || parent != want.parent {
			t.Errorf("queue %s: pool %q parent %q, want %q and %q", name, q.GetLabels()[key], parent, want.pool, want.parent)
		}
	}
	o, err := c.Observe(h.ctx, dedicated)
	if err != nil || !o.QueuesInSync() || len(o.Queues) != 2 {
		t.Errorf("observed queues of the DEDICATED virtual cluster: %+v (%v)", o.Queues, err)
	}

	p, err := h.createPod(dedicated, gpus("1"), kai)
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[key] != "dedicated-t2" || p.Labels[KAIQueueLabel] != LeafQueueName(dedicated.Name) {
		t.Errorf("KAI pod labels %v, want its pool and queue added", p.Labels)
	}
	_, err = h.createPod(shared, gpus("1"), kai, func(p *corev1.Pod) { p.Labels[key] = "dedicated-t2" })
	mustBeDenied(t, "pod naming another KAI node pool", err, `label kai.scheduler/node-pool must be "shared"`, `(got "dedicated-t2")`)

	for _, vc := range []VirtualCluster{dedicated, shared} {
		if err := c.Delete(h.ctx, vc); err != nil {
			t.Fatalf("delete %s: %v", vc.Name, err)
		}
	}
	for _, name := range []string{DepartmentQueueName(dept), TeamQueueName(dept, "t1"), TeamQueueName(dept, "t2")} {
		if _, err := h.queue(name); !apierrors.IsNotFound(err) {
			t.Errorf("queue %s left: %v", name, err)
		}
	}
}
