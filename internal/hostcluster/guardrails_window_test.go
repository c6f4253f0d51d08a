package hostcluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// grantSyncerPods lets the syncers of vcs create pods anywhere, bound
// before their namespaces exist: the chart's Role does the same in the
// namespace, but only once the release is installed, and RBAC has a cache
// of its own. With the grant in force beforehand, the first pod a syncer
// sends into a namespace that was just created meets nothing but
// admission, which is what these tests time.
func (h *harness) grantSyncerPods(vcs []VirtualCluster) {
	h.t.Helper()
	name := "gpuplane-test-syncer-pods" + h.sfx
	rbac := h.kube.RbacV1()
	if _, err := rbac.ClusterRoles().Create(h.ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "update"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		h.t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	for _, vc := range vcs {
		ns, sa := SyncerServiceAccount(vc.Name)
		crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa})
	}
	if _, err := rbac.ClusterRoleBindings().Create(h.ctx, crb, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// In force once the last syncer may create a pod in an existing
	// namespace.
	last := h.asSyncer(vcs[len(vcs)-1])
	for i := 0; ; i++ {
		_, err := last.CoreV1().Pods("default").Create(h.ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"},
			Spec:       restrictedPodSpec("c", "busybox"),
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return
		}
		if i == 100 {
			h.t.Fatalf("the syncers' grant never took effect: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// asSyncer is a client acting as vc's syncer ServiceAccount.
func (h *harness) asSyncer(vc VirtualCluster) kubernetes.Interface {
	ns, _ := SyncerServiceAccount(vc.Name)
	cfg := *h.config
	cfg.Impersonate.UserName = SyncerUsername(vc.Name)
	cfg.Impersonate.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	return kubernetes.NewForConfigOrDie(&cfg)
}

// forbiddenPod is a GPU pod that names another team's queue and presets its
// node: refused by two rules.
func forbiddenPod(name string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{KAIQueueLabel: foreignQueue}},
		Spec:       restrictedPodSpec("main", "registry.example.com/train:1"),
	}
	p.Spec.SchedulerName = KAISchedulerName
	p.Spec.NodeName = "gpu-node-7"
	gpuContainer("1")(hostileEnv{}, p)
	return p
}

// TestNoWindowForANewNamespace: the guardrails hold from the first request
// into a namespace Apply creates, so there is no moment between a virtual
// cluster's namespace and its protection for a tenant to use. The shared
// policies are loaded once (by the first Apply); each further virtual
// cluster's namespace is then written exactly as Apply writes it, and the
// very next request, its syncer's pod naming another team's queue, must be
// refused by the guardrails with this virtual cluster's own values, while
// a compliant pod sent right after is admitted.
//
// The control shows that the test would see a window if there were one:
// an admission policy created together with its namespace, as the
// per-virtual-cluster design created its policies, is not in force for the
// first request into it (the API server loads policies once a second).
func TestNoWindowForANewNamespace(t *testing.T) {
	h := newHarness(t)
	const n = 20
	dept := h.n("nowindow")
	first := testVC(h.n("nw-first"), "t1", dept, TierShared)
	vcs := []VirtualCluster{first}
	for i := range n {
		tier := TierShared
		if i%2 == 1 {
			tier = TierDedicated
		}
		vcs = append(vcs, testVC(h.n(fmt.Sprintf("nw-%02d", i)), fmt.Sprintf("t%d", i), dept, tier))
	}
	h.grantSyncerPods(vcs)
	h.apply(first) // loads the shared policies and waits until they are in force

	mutating, err := h.client.MutatingAdmissionPolicySupported()
	if err != nil {
		t.Fatal(err)
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	for _, vc := range vcs[1:] {
		ns := RenderNamespace(vc, h.client.settings, GuardrailParams(vc, h.client.settings, mutating))
		if _, err := h.kube.CoreV1().Namespaces().Apply(h.ctx, ns, apply); err != nil {
			t.Fatal(err)
		}
		pods := h.asSyncer(vc).CoreV1().Pods(NamespaceName(vc.Name))
		_, err := pods.Create(h.ctx, forbiddenPod("first"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		mustBeDenied(t, vc.Name+": the first pod into a new namespace", err, "'"+GuardrailsPolicyName+"'",
			`label kai.scheduler/queue must be "`+LeafQueueName(vc.Name)+`", the queue of virtual cluster `+vc.Name)
		ok := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ok", Labels: map[string]string{}}, Spec: restrictedPodSpec("main", "busybox")}
		if vc.Tier == TierDedicated {
			selectPool(vc.Pool)(hostileEnv{}, ok)
		}
		if _, err := pods.Create(h.ctx, ok, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s: a compliant pod is refused: %v", vc.Name, err)
		}
	}

	// The control: a per-namespace policy made with its namespace.
	windows := 0
	for i := range 3 {
		name := h.n(fmt.Sprintf("nw-control-%d", i))
		if _, err := h.kube.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		adm := h.kube.AdmissionregistrationV1()
		if _, err := adm.ValidatingAdmissionPolicies().Create(h.ctx, &admissionv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionv1.Fail),
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create},
						Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}},
				}}},
				Validations: []admissionv1.Validation{{Expression: "false", Message: "control"}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.ValidatingAdmissionPolicyBindings().Create(h.ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
				MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: name}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := h.kube.CoreV1().Pods(name).Create(h.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "first"}, Spec: restrictedPodSpec("c", "busybox")},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			windows++
		}
		t.Cleanup(func() {
			_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	t.Logf("control: the first pod into a namespace whose own policy was created with it was admitted %d times out of 3", windows)
	if windows == 0 {
		t.Error("control: a policy created with its namespace was in force for the first pod three times out of three; this test cannot tell a window from none")
	}
}

// TestLegacyGuardrailsMigrate: a virtual cluster guarded by admission
// objects of its own (the per-virtual-cluster design) moves to the shared
// ones without a moment unguarded. Its syncer keeps sending a forbidden pod
// while Apply writes the parameters, waits for the shared policies to be
// in force there and deletes the old objects, and for a while after (the
// API server unloads the deleted ones within a second): every attempt must
// be refused. Afterwards nothing of the old objects is left.
func TestLegacyGuardrailsMigrate(t *testing.T) {
	h := newHarness(t)
	vc := testVC(h.n("legacy"), "t1", h.n("legacy-dept"), TierShared)
	h.grantSyncerPods([]VirtualCluster{vc})
	ns := NamespaceName(vc.Name)
	if _, err := h.kube.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelVirtualCluster: vc.Name}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	legacy := PolicyName(vc.Name)
	labels := map[string]string{LabelManagedBy: ManagedByValue, LabelVirtualCluster: vc.Name}
	adm := h.kube.AdmissionregistrationV1()
	// The old objects as far as this test needs them: its own validating
	// policy (refusing preset node names) and mutating policy, each bound
	// to the namespace by name.
	pods := admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
	inNamespace := &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: ns}}
	if _, err := adm.ValidatingAdmissionPolicies().Create(h.ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: legacy, Labels: labels},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: pods}}},
			Validations:      []admissionv1.Validation{{Expression: `!has(object.spec.nodeName) || object.spec.nodeName == ""`, Message: "legacy: no preset node"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(h.ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: legacy, Labels: labels},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: legacy, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: inNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.MutatingAdmissionPolicies().Create(h.ctx, &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: legacy, Labels: labels},
		Spec: admissionv1.MutatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionv1.Fail), ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: pods}}},
			Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: `Object{}`}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Create(h.ctx, &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: legacy, Labels: labels},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: legacy,
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: inNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The worst case, a host cluster's first Apply after the upgrade: the
	// shared policies do not exist yet, so the move includes their load.
	for _, kind := range []string{vapbKind, vapKind, mapbKind, mapKind} {
		if err := h.dyn.Resource(admissionGVR(kind)).Delete(h.ctx, GuardrailsPolicyName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	syncer := h.asSyncer(vc).CoreV1().Pods(ns)
	send := func() error {
		_, err := syncer.Create(h.ctx, forbiddenPod("stray"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for i := 0; send() == nil; i++ { // the old policy must be in force first
		if i == 100 {
			t.Fatal("the per-virtual-cluster policy never took effect")
		}
		time.Sleep(50 * time.Millisecond)
	}

	var attempts, admitted atomic.Int64
	var refusedBy sync.Map // which policy refused, as seen
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			attempts.Add(1)
			err := send()
			switch {
			case err == nil:
				admitted.Add(1)
			case strings.Contains(err.Error(), "'"+GuardrailsPolicyName+"'"):
				refusedBy.Store(GuardrailsPolicyName, true)
			case strings.Contains(err.Error(), "'"+legacy+"'"):
				refusedBy.Store(legacy, true)
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	steps := h.apply(vc)
	time.Sleep(1500 * time.Millisecond) // longer than the API server's policy reload
	close(stop)
	<-done

	if r, _ := steps.Of(StepGuardrails); !strings.Contains(r.Detail, "removed the 4 per-virtual-cluster admission objects") {
		t.Errorf("guardrails step: %q", r.Detail)
	}
	if n := admitted.Load(); n > 0 {
		t.Errorf("%d of %d forbidden pods were admitted while the guardrails moved", n, attempts.Load())
	}
	for _, p := range []string{legacy, GuardrailsPolicyName} {
		if _, ok := refusedBy.Load(p); !ok {
			t.Errorf("no attempt was refused by %s (attempts %d): the test did not cover the move", p, attempts.Load())
		}
	}
	if _, err := adm.ValidatingAdmissionPolicies().Get(h.ctx, legacy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("old validating policy: %v", err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Get(h.ctx, legacy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("old validating binding: %v", err)
	}
	if _, err := adm.MutatingAdmissionPolicies().Get(h.ctx, legacy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("old mutating policy: %v", err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Get(h.ctx, legacy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("old mutating binding: %v", err)
	}
	t.Logf("%d forbidden pods sent during the move, %d admitted", attempts.Load(), admitted.Load())
}

// TestSharedGuardrailsRepairedAtOnce: one program guards every virtual
// cluster on the host, so deleting one of its objects would unguard them
// all; the Client that applied them re-applies them as soon as its watch
// sees the deletion, without waiting for a reconcile.
func TestSharedGuardrailsRepairedAtOnce(t *testing.T) {
	h := newHarness(t)
	vc := testVC(h.n("repair"), "t1", h.n("repair-dept"), TierShared)
	h.grantSyncerPods([]VirtualCluster{vc})
	h.apply(vc)
	adm := h.kube.AdmissionregistrationV1()
	before, err := adm.ValidatingAdmissionPolicyBindings().Get(h.ctx, GuardrailsPolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.ValidatingAdmissionPolicyBindings().Delete(h.ctx, GuardrailsPolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for {
		after, err := adm.ValidatingAdmissionPolicyBindings().Get(h.ctx, GuardrailsPolicyName, metav1.GetOptions{})
		if err == nil && after.UID != before.UID {
			t.Logf("binding re-created %s after its deletion", time.Since(deleted).Round(time.Millisecond))
			break
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if time.Since(deleted) > 10*time.Second {
			t.Fatal("the deleted shared binding was not re-created within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And it is enforced again (the API server loads it within a second).
	pods := h.asSyncer(vc).CoreV1().Pods(NamespaceName(vc.Name))
	for i := 0; ; i++ {
		_, err := pods.Create(h.ctx, forbiddenPod("stray"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "'"+GuardrailsPolicyName+"'") {
			break
		}
		if i == 100 {
			t.Fatalf("the re-created guardrails are not enforced: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
