// Package vclusterproof drives vCluster's own pod syncer (the code that
// turns a tenant's pod in the virtual cluster into the pod on the host),
// imported as a library at the chart version gpuplane installs by default,
// configured with exactly the values gpuplane renders (testdata, kept
// current by internal/hostcluster TestProofValuesAreCurrent). It answers,
// by running vCluster's code rather than by reading it, what reaches KAI
// on the host: docs/vcluster-verification.md.
//
// It is a separate Go module so that vCluster's large dependency graph
// (its own client-go, controller-runtime, Helm, etcd...) never enters
// gpuplane's. Run it with `make test` or `cd test/vclusterproof && go test ./...`.
package vclusterproof

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vclusterconfig "github.com/loft-sh/vcluster/config"
	"github.com/loft-sh/vcluster/pkg/config"
	"github.com/loft-sh/vcluster/pkg/controllers/resources/pods"
	"github.com/loft-sh/vcluster/pkg/scheme"
	"github.com/loft-sh/vcluster/pkg/specialservices"
	"github.com/loft-sh/vcluster/pkg/syncer/synccontext"
	syncertesting "github.com/loft-sh/vcluster/pkg/syncer/testing"
	testingutil "github.com/loft-sh/vcluster/pkg/util/testing"
	"github.com/loft-sh/vcluster/pkg/util/translate"
)

// What KAI reads from a pod, and what its binder writes back on the host.
const (
	queueLabel          = "kai.scheduler/queue"
	kaiPriorityLabel    = "priorityClassName"
	preemptibilityLabel = "kai.scheduler/preemptibility"
	fractionAnnotation  = "gpu-fraction"
	gpuMemoryAnnotation = "gpu-memory"
	gpuGroupLabel       = "runai-gpu-group"
	kaiScheduler        = "kai-scheduler"
)

const (
	virtualNamespace = "ml"
	podName          = "train-0"
)

func TestMain(m *testing.M) {
	// vCluster's syncer logs every mapping it creates through klog.
	klog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// podSyncer is the part of vCluster's pod syncer the proof drives: create
// the host pod for a new virtual pod, and reconcile an existing pair.
type podSyncer interface {
	SyncToHost(ctx *synccontext.SyncContext, event *synccontext.SyncToHostEvent[*corev1.Pod]) (ctrl.Result, error)
	Sync(ctx *synccontext.SyncContext, event *synccontext.SyncEvent[*corev1.Pod]) (ctrl.Result, error)
}

// vclusterConfig merges gpuplane's rendered values over the chart's
// defaults as Helm does (a null removes a default) and parses the result as
// the control plane parses its config.yaml. edit, when set, changes the
// rendered values first (controls: what happens without a setting).
func vclusterConfig(t *testing.T, file string, edit func(values map[string]any)) *config.VirtualClusterConfig {
	t.Helper()
	var defaults, rendered map[string]any
	if err := yaml.Unmarshal([]byte(vclusterconfig.Values), &defaults); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rendered); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(rendered)
	}
	merged, err := yaml.Marshal(coalesce(defaults, rendered))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseConfigBytes(merged, testingutil.DefaultTestVClusterName, nil)
	if err != nil {
		t.Fatalf("vCluster refuses the values gpuplane renders: %v", err)
	}
	cfg.HostNamespace = testingutil.DefaultTestTargetNamespace
	cfg.HostConfig = &rest.Config{}
	host := fake.NewClientset()
	host.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.0"}
	cfg.HostClient = host
	return cfg
}

// coalesce overlays values on defaults: maps merge key by key, anything
// else replaces, and nil deletes.
func coalesce(defaults, values map[string]any) map[string]any {
	out := maps.Clone(defaults)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range values {
		if v == nil {
			delete(out, k)
			continue
		}
		vm, vIsMap := v.(map[string]any)
		dm, dIsMap := out[k].(map[string]any)
		if vIsMap && dIsMap {
			out[k] = coalesce(dm, vm)
		} else {
			out[k] = v
		}
	}
	return out
}

type world struct {
	ctx    *synccontext.SyncContext
	syncer podSyncer
	host   *testingutil.FakeIndexClient
	vc     *testingutil.FakeIndexClient
}

// start registers vCluster's pod syncer with fake host and virtual clients
// holding what the syncer looks up: the virtual namespace, the vCluster
// Service and the virtual cluster's DNS Service on the host.
func start(t *testing.T, cfg *config.VirtualClusterConfig, virtualObjects ...client.Object) *world {
	t.Helper()
	translate.Default = translate.NewSingleNamespaceTranslator(testingutil.DefaultTestTargetNamespace)
	specialservices.Default = specialservices.NewDefaultServiceSyncer()
	hostObjects := []client.Object{
		// KAI's priority classes, labelled for tenants as the platform's
		// operator does (gpuplane.io/tenant-priority-class=true), and one
		// that is not.
		kaiPriorityClass("train", 50, true), kaiPriorityClass("build-preemptible", 75, true),
		kaiPriorityClass("build", 100, true), kaiPriorityClass("inference", 125, true),
		kaiPriorityClass("platform-critical", 1000, false),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: testingutil.DefaultTestVClusterServiceName, Namespace: testingutil.DefaultTestCurrentNamespace},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: translate.Default.HostName(nil, "kube-dns", "kube-system").Name, Namespace: testingutil.DefaultTestTargetNamespace},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.53"}},
	}
	virtualObjects = append(virtualObjects, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: virtualNamespace}})
	w := &world{
		host: testingutil.NewFakeClient(scheme.Scheme, asRuntime(hostObjects)...),
		vc:   testingutil.NewFakeClient(scheme.Scheme, asRuntime(virtualObjects)...),
	}
	rc := syncertesting.NewFakeRegisterContext(cfg, w.host, w.vc)
	ctx, obj := syncertesting.FakeStartSyncer(t, rc, pods.New)
	s, ok := obj.(podSyncer)
	if !ok {
		t.Fatalf("vCluster's pod syncer (%T) no longer has SyncToHost and Sync", obj)
	}
	w.ctx, w.syncer = ctx, s
	return w
}

func kaiPriorityClass(name string, value int32, forTenants bool) *schedulingv1.PriorityClass {
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if forTenants {
		pc.Labels = map[string]string{tenantPriorityClassLabel: "true"}
	}
	return pc
}

// tenantPriorityClassLabel is hostcluster.TenantPriorityClassLabel (this
// module does not import gpuplane; the rendered values carry the selector).
const tenantPriorityClassLabel = "gpuplane.io/tenant-priority-class"

// hostPod is the host pod of the virtual pod podName, as stored.
func (w *world) hostPod(t *testing.T) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	key := client.ObjectKey{Namespace: testingutil.DefaultTestTargetNamespace, Name: translate.Default.HostName(nil, podName, virtualNamespace).Name}
	if err := w.host.Get(context.Background(), key, p); err != nil {
		t.Fatalf("host pod %s: %v", key, err)
	}
	return p
}

func (w *world) virtualPod(t *testing.T) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := w.vc.Get(context.Background(), client.ObjectKey{Namespace: virtualNamespace, Name: podName}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func asRuntime(objs []client.Object) []runtime.Object {
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}

// tenantGPUPod is what a tenant creates in the virtual cluster for a
// shared-GPU inference server in its queue.
func tenantGPUPod() *corev1.Pod {
	priority := int32(125)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName, Namespace: virtualNamespace, UID: "0f1e2d3c",
			Labels: map[string]string{
				queueLabel: "vc-tenant", kaiPriorityLabel: "inference", preemptibilityLabel: "non-preemptible", "app": "llm",
			},
			Annotations: map[string]string{fractionAnnotation: "0.5", gpuMemoryAnnotation: "2000"},
		},
		Spec: corev1.PodSpec{
			SchedulerName:     kaiScheduler,
			PriorityClassName: "inference",
			Priority:          &priority,
			Containers:        []corev1.Container{{Name: "server", Image: "vllm/vllm-openai:latest"}},
		},
	}
}

// createHostPod runs the syncer's first sync of a new virtual pod.
func (w *world) createHostPod(t *testing.T, v *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := w.syncer.SyncToHost(w.ctx, synccontext.NewSyncToHostEvent(v.DeepCopy())); err != nil {
		t.Fatalf("SyncToHost: %v", err)
	}
	return w.hostPod(t)
}

// TestKAIFieldsReachTheHostPod: the queue label, KAI's priority and
// preemptibility labels, the shared-GPU annotations, schedulerName and the
// priority class reach the host pod unchanged with gpuplane's values.
func TestKAIFieldsReachTheHostPod(t *testing.T) {
	v := tenantGPUPod()
	w := start(t, vclusterConfig(t, "values-shared.yaml", nil), v)
	p := w.createHostPod(t, v)
	for k, want := range v.Labels {
		if got, ok := p.Labels[k]; !ok || got != want {
			t.Errorf("host pod label %s = %q (present %v), want %q", k, got, ok, want)
		}
	}
	for k, want := range v.Annotations {
		if got := p.Annotations[k]; got != want {
			t.Errorf("host pod annotation %s = %q, want %q", k, got, want)
		}
	}
	if p.Spec.SchedulerName != kaiScheduler {
		t.Errorf("host schedulerName %q", p.Spec.SchedulerName)
	}
	if p.Spec.PriorityClassName != "inference" || p.Spec.Priority == nil || *p.Spec.Priority != 125 {
		t.Errorf("host priority class %q, priority %v; want inference, 125", p.Spec.PriorityClassName, p.Spec.Priority)
	}
	t.Logf("host pod %s/%s: labels %v", p.Namespace, p.Name, p.Labels)
}

// TestPriorityClassNeedsFromHostSync is the control: without
// sync.fromHost.priorityClasses (the default), the syncer blanks the
// priority class, and KAI would treat every tenant pod as its default,
// preemptible "train" workload.
func TestPriorityClassNeedsFromHostSync(t *testing.T) {
	v := tenantGPUPod()
	cfg := vclusterConfig(t, "values-shared.yaml", func(values map[string]any) {
		delete(values["sync"].(map[string]any)["fromHost"].(map[string]any), "priorityClasses")
	})
	w := start(t, cfg, v)
	p := w.createHostPod(t, v)
	if p.Spec.PriorityClassName != "" || p.Spec.Priority != nil {
		t.Errorf("without priority class sync the host pod kept %q / %v", p.Spec.PriorityClassName, p.Spec.Priority)
	}
	if p.Labels[kaiPriorityLabel] != "inference" {
		t.Errorf("KAI's priorityClassName label is a plain label and passes either way: %v", p.Labels)
	}
}

// TestOnlyTenantPriorityClassesSync: the selector gpuplane renders makes
// the syncer refuse pods naming a host priority class without the tenant
// label; vCluster exempts its two system classes from the selector.
func TestOnlyTenantPriorityClassesSync(t *testing.T) {
	v := tenantGPUPod()
	v.Spec.PriorityClassName = "platform-critical"
	w := start(t, vclusterConfig(t, "values-shared.yaml", nil), v)
	if _, err := w.syncer.SyncToHost(w.ctx, synccontext.NewSyncToHostEvent(v.DeepCopy())); err != nil {
		t.Fatalf("SyncToHost: %v", err)
	}
	pods := &corev1.PodList{}
	if err := w.host.List(context.Background(), pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("a pod naming an unlabelled host priority class reached the host: %s", pods.Items[0].Spec.PriorityClassName)
	}

	v = tenantGPUPod()
	v.Spec.PriorityClassName = "system-node-critical"
	w = start(t, vclusterConfig(t, "values-shared.yaml", nil), v)
	if p := w.createHostPod(t, v); p.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("system class: host priority class %q", p.Spec.PriorityClassName)
	} else {
		t.Log("system-node-critical passes the selector: the host guardrail must refuse it for tenants")
	}
}

// TestBinderLabelSurvivesSyncerUpdates follows a shared-GPU pod through
// what happens after the first sync: KAI's binder labels the host pod with
// its GPU group; then the tenant edits the virtual pod, and the syncer
// updates the host pod. The label must survive that update, or pods
// sharing a GPU lose track of it. It also shows what the same three-way
// merge lets a tenant do, which the host guardrails must refuse.
func TestBinderLabelSurvivesSyncerUpdates(t *testing.T) {
	v := tenantGPUPod()
	w := start(t, vclusterConfig(t, "values-shared.yaml", nil), v)
	created := w.createHostPod(t, v)

	// KAI's binder labels the host pod.
	bound := created.DeepCopy()
	bound.Labels[gpuGroupLabel] = "gpu-group-7"
	if err := w.host.Update(context.Background(), bound); err != nil {
		t.Fatal(err)
	}
	bound = w.hostPod(t)
	vNow := w.virtualPod(t)
	if _, err := w.syncer.Sync(w.ctx, synccontext.NewSyncEventWithOld(created, bound.DeepCopy(), vNow.DeepCopy(), vNow.DeepCopy())); err != nil {
		t.Fatalf("Sync after the binder: %v", err)
	}
	if got := w.hostPod(t).Labels[gpuGroupLabel]; got != "gpu-group-7" {
		t.Fatalf("the syncer dropped the binder's label on the host: %q", got)
	}
	vSynced := w.virtualPod(t)
	if got := vSynced.Labels[gpuGroupLabel]; got != "gpu-group-7" {
		t.Errorf("host label change not copied into the virtual pod (got %q); the proof's premise about the merge changed", got)
	}

	// The tenant edits an unrelated label: the syncer's next update of the
	// host pod keeps the binder's label.
	hostBefore := w.hostPod(t)
	edited := vSynced.DeepCopy()
	edited.Labels["owner"] = "carol"
	if err := w.vc.Update(context.Background(), edited); err != nil {
		t.Fatal(err)
	}
	edited = w.virtualPod(t)
	if _, err := w.syncer.Sync(w.ctx, synccontext.NewSyncEventWithOld(hostBefore.DeepCopy(), hostBefore.DeepCopy(), vSynced.DeepCopy(), edited.DeepCopy())); err != nil {
		t.Fatalf("Sync after a tenant edit: %v", err)
	}
	after := w.hostPod(t)
	if after.Labels[gpuGroupLabel] != "gpu-group-7" || after.Labels["owner"] != "carol" {
		t.Fatalf("after the tenant's edit the host pod has labels %v; want the binder's group kept and the edit applied", after.Labels)
	}

	// What the merge also allows: a tenant who rewrites the (copied) label
	// in the virtual pod rewrites it on the host. gpuplane's host admission
	// policy refuses exactly this update of runai-gpu-group.
	forged := w.virtualPod(t)
	before := forged.DeepCopy()
	forged.Labels[gpuGroupLabel] = "someone-elses-group"
	if err := w.vc.Update(context.Background(), forged); err != nil {
		t.Fatal(err)
	}
	forged = w.virtualPod(t)
	hostNow := w.hostPod(t)
	if _, err := w.syncer.Sync(w.ctx, synccontext.NewSyncEventWithOld(hostNow.DeepCopy(), hostNow.DeepCopy(), before, forged.DeepCopy())); err != nil {
		t.Fatalf("Sync after the forged label: %v", err)
	}
	if got := w.hostPod(t).Labels[gpuGroupLabel]; got != "someone-elses-group" {
		t.Errorf("forged label on the host: %q; the merge no longer copies virtual label edits (update the docs)", got)
	} else {
		t.Log("a virtual-side edit of runai-gpu-group reaches the host: only the host guardrail stops it")
	}
}

// dedicatedPool is team-b's own node pool (names.DedicatedPool), as in
// testdata/values-dedicated.yaml.
const dedicatedPool = "dedicated-team-b"

// TestDedicatedPinning: with the DEDICATED values every host pod gets the
// pool's node selector and the toleration of its taint, whatever the
// tenant wrote.
func TestDedicatedPinning(t *testing.T) {
	v := tenantGPUPod()
	v.Spec.NodeSelector = map[string]string{"gpuplane.io/pool": "shared"}
	w := start(t, vclusterConfig(t, "values-dedicated.yaml", nil), v)
	p := w.createHostPod(t, v)
	if p.Spec.NodeSelector["gpuplane.io/pool"] != dedicatedPool {
		t.Errorf("host node selector %v, want the dedicated pool (the syncer's selector wins)", p.Spec.NodeSelector)
	}
	found := false
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == "gpuplane.io/pool" && tol.Value == dedicatedPool && tol.Effect == corev1.TaintEffectNoSchedule {
			found = true
		}
	}
	if !found {
		t.Errorf("host tolerations %+v lack the dedicated pool's", p.Spec.Tolerations)
	}
}
