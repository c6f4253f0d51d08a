package hostcluster

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	admissionac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/gpuplane/gpuplane/internal/quota"
)

// QueueGVR is KAI Scheduler's cluster-scoped Queue resource.
var QueueGVR = schema.GroupVersionResource{Group: "scheduling.run.ai", Version: "v2", Resource: "queues"}

const namespaceNameLabel = "kubernetes.io/metadata.name"

// kaiDefaultPriority is what KAI assumes for a queue without a priority.
const kaiDefaultPriority = 100

// RenderNamespace renders the host namespace. Pod Security "baseline" is
// enforced because every tenant pod lands here through the vCluster syncer:
// without it a tenant could run privileged pods on shared nodes.
func RenderNamespace(vc VirtualCluster) *corev1ac.NamespaceApplyConfiguration {
	labels := commonLabels(vc)
	labels[LabelTier] = vc.Tier
	labels["pod-security.kubernetes.io/enforce"] = "baseline"
	return corev1ac.Namespace(NamespaceName(vc.Name)).
		WithLabels(labels).
		WithAnnotations(generationAnnotations(vc))
}

// RenderQueues renders the queue hierarchy parents first: department, team,
// leaf. Every resource is written with quota, overQuotaWeight and limit,
// because KAI reads an absent limit as 0 ("nothing allowed").
func RenderQueues(vc VirtualCluster) []*unstructured.Unstructured {
	dept := DepartmentQueueName(vc.Department)
	team := TeamQueueName(vc.Department, vc.Team)
	base := func(name, level, display, parent string, spec QueueSpec) *unstructured.Unstructured {
		q := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": QueueGVR.GroupVersion().String(),
			"kind":       "Queue",
			"metadata": map[string]any{
				"name": name,
				"labels": map[string]any{
					LabelManagedBy:  ManagedByValue,
					LabelQueueLevel: level,
					LabelDepartment: vc.Department,
				},
			},
			"spec": queueSpecObject(display, parent, spec),
		}}
		return q
	}
	d := base(dept, LevelDepartment, vc.Department, "", vc.DepartmentQueue)
	t := base(team, LevelTeam, vc.Department+"/"+vc.Team, dept, vc.TeamQueue)
	unstructured.SetNestedField(t.Object, vc.Team, "metadata", "labels", LabelTeam)
	l := base(LeafQueueName(vc.Name), LevelLeaf, vc.Name, team, vc.Leaf)
	unstructured.SetNestedField(l.Object, vc.Team, "metadata", "labels", LabelTeam)
	unstructured.SetNestedField(l.Object, vc.Name, "metadata", "labels", LabelVirtualCluster)
	unstructured.SetNestedField(l.Object, fmt.Sprint(vc.Generation), "metadata", "annotations", AnnotationGen)
	return []*unstructured.Unstructured{d, t, l}
}

func queueSpecObject(display, parent string, spec QueueSpec) map[string]any {
	quota, limit := kaiUnits(spec.Quota), [3]float64{-1, -1, -1}
	if spec.Limit != nil {
		limit = kaiUnits(*spec.Limit)
	}
	res := map[string]any{}
	for i, name := range []string{"gpu", "cpu", "memory"} {
		res[name] = map[string]any{
			"quota":           quota[i],
			"overQuotaWeight": spec.OverQuotaWeight,
			"limit":           limit[i],
		}
	}
	out := map[string]any{"displayName": display, "resources": res}
	if parent != "" {
		out["parentQueue"] = parent
	}
	// Always written: a field gpuplane leaves out is not reverted by server-
	// side apply when someone else sets it, so "KAI's default" is spelt out.
	priority := int64(spec.Priority)
	if priority == 0 {
		priority = kaiDefaultPriority
	}
	out["priority"] = priority
	return out
}

// kaiUnits converts to KAI's units through quota.ToKAI, the one conversion
// (memory rounded down; negative amounts become -1, KAI's "unlimited").
func kaiUnits(q Quantities) [3]float64 {
	g, c, m := quota.ToKAI(quota.Resources{GPU: quota.GPU(q.GPUCenti), CPUMillis: q.CPUMillis, MemoryBytes: q.MemoryBytes})
	return [3]float64{g, c, m}
}

// Guardrails are the admission policies of one virtual cluster. Mutating
// and MutatingBinding are nil when the API server has no
// MutatingAdmissionPolicy.
type Guardrails struct {
	Validating        *admissionac.ValidatingAdmissionPolicyApplyConfiguration
	ValidatingBinding *admissionac.ValidatingAdmissionPolicyBindingApplyConfiguration
	Mutating          *admissionac.MutatingAdmissionPolicyApplyConfiguration
	MutatingBinding   *admissionac.MutatingAdmissionPolicyBindingApplyConfiguration
}

// CEL fragments over a Pod. GPU pods request nvidia.com/gpu (or a MIG slice,
// which KAI also counts as GPU) in any container or init container, or ask
// for a shared GPU by annotation.
const (
	celGPUResource = `r == '` + NvidiaGPUResource + `' || r.startsWith('nvidia.com/mig-')`
	celRequestsGPU = `(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).exists(c, has(c.resources) && ` +
		`((has(c.resources.limits) && c.resources.limits.exists(r, ` + celGPUResource + `)) || ` +
		`(has(c.resources.requests) && c.resources.requests.exists(r, ` + celGPUResource + `))))`
	celSharedGPU = `has(object.metadata.annotations) && ('` + KAIFractionAnnot + `' in object.metadata.annotations || '` + KAIGPUMemoryAnnot + `' in object.metadata.annotations)`
	celKAIPod    = `has(object.spec.schedulerName) && object.spec.schedulerName == '` + KAISchedulerName + `'`
	celHasQueue  = `has(object.metadata.labels) && '` + KAIQueueLabel + `' in object.metadata.labels`
)

// RenderGuardrails renders the admission policies that make the leaf queue
// the only queue this virtual cluster's pods can use.
//
// KAI itself checks nothing (KAI#2068: any pod may name any queue; a pod
// without schedulerName bypasses KAI quotas, KAI#140), so on the host:
//   - a GPU pod must use schedulerName kai-scheduler;
//   - a kai.scheduler/queue label, where present, must name the leaf queue;
//   - a pod KAI schedules must carry that label, since an unlabelled pod
//     lands in default-queue, outside the tenant's quota. When the server
//     supports MutatingAdmissionPolicy (GA in 1.36), a mutating policy adds
//     the label to such pods first, so tenants need not know their queue name;
//     the validating rule stays as the guarantee either way;
//   - shared-GPU annotations (gpu-fraction, gpu-memory) are refused unless the
//     tier is SHARED and fractional GPUs are allowed: KAI does not isolate GPU
//     memory, and pods sharing a GPU may belong to different tenants.
//
// Policies are per virtual cluster with the queue name written into the CEL
// as a literal: no parameter objects that a namespace admin could edit.
func RenderGuardrails(vc VirtualCluster, mutating bool) Guardrails {
	name := PolicyName(vc.Name)
	ns := NamespaceName(vc.Name)
	leaf := LeafQueueName(vc.Name)
	labels := commonLabels(vc)
	annotations := generationAnnotations(vc)
	podRules := admissionac.MatchResources().WithResourceRules(
		admissionac.NamedRuleWithOperations().
			WithOperations(admissionv1.Create, admissionv1.Update).
			WithAPIGroups("").WithAPIVersions("v1").WithResources("pods"))
	inNamespace := metav1ac.LabelSelector().WithMatchLabels(map[string]string{namespaceNameLabel: ns})

	validations := []*admissionac.ValidationApplyConfiguration{
		admissionac.Validation().
			WithExpression(`!variables.gpuPod || (` + celKAIPod + `)`).
			WithReason(metav1.StatusReasonForbidden).
			WithMessageExpression(`'pods using GPUs must set spec.schedulerName: ` + KAISchedulerName + ` (got "' + ` +
				`(has(object.spec.schedulerName) ? object.spec.schedulerName : 'default-scheduler') + ` +
				`'"); other schedulers bypass the quota of queue ` + leaf + `'`),
		admissionac.Validation().
			WithExpression(`!(` + celHasQueue + `) || object.metadata.labels['` + KAIQueueLabel + `'] == '` + leaf + `'`).
			WithReason(metav1.StatusReasonForbidden).
			WithMessageExpression(`'label ` + KAIQueueLabel + ` must be "` + leaf + `", the queue of virtual cluster ` + vc.Name +
				` (got "' + object.metadata.labels['` + KAIQueueLabel + `'] + '")'`),
		admissionac.Validation().
			WithExpression(`!variables.kaiPod || (` + celHasQueue + `)`).
			WithReason(metav1.StatusReasonForbidden).
			WithMessageExpression(`'pods scheduled by ` + KAISchedulerName + ` must carry label ` + KAIQueueLabel + `=` + leaf +
				`; without it KAI puts them in default-queue, outside the quota of this virtual cluster'`),
	}
	if !(vc.Tier == TierShared && vc.AllowFractionalGPUs) {
		why := "fractional GPUs are not enabled for virtual cluster " + vc.Name
		if vc.Tier == TierDedicated {
			why = "virtual cluster " + vc.Name + " is in the DEDICATED tier, and KAI does not isolate GPU memory between pods sharing a GPU"
		}
		validations = append(validations, admissionac.Validation().
			WithExpression(`!(`+celSharedGPU+`)`).
			WithReason(metav1.StatusReasonForbidden).
			WithMessageExpression(`'shared-GPU annotations (`+KAIFractionAnnot+`, `+KAIGPUMemoryAnnot+`) are refused: `+why+`; request whole GPUs with `+NvidiaGPUResource+`'`))
	}

	g := Guardrails{
		Validating: admissionac.ValidatingAdmissionPolicy(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.ValidatingAdmissionPolicySpec().
				WithFailurePolicy(admissionv1.Fail).
				WithMatchConstraints(podRules).
				WithVariables(
					admissionac.Variable().WithName("gpuPod").WithExpression(`(`+celRequestsGPU+`) || (`+celSharedGPU+`)`),
					admissionac.Variable().WithName("kaiPod").WithExpression(`variables.gpuPod || (`+celKAIPod+`)`),
				).
				WithValidations(validations...)),
		ValidatingBinding: admissionac.ValidatingAdmissionPolicyBinding(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.ValidatingAdmissionPolicyBindingSpec().
				WithPolicyName(name).
				WithValidationActions(admissionv1.Deny).
				WithMatchResources(admissionac.MatchResources().WithNamespaceSelector(inNamespace))),
	}
	if mutating {
		g.Mutating = admissionac.MutatingAdmissionPolicy(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.MutatingAdmissionPolicySpec().
				WithFailurePolicy(admissionv1.Fail).
				WithMatchConstraints(podRules).
				WithMatchConditions(admissionac.MatchCondition().
					WithName("kai-pod-without-queue").
					WithExpression(`((` + celRequestsGPU + `) || (` + celSharedGPU + `) || (` + celKAIPod + `)) && !(` + celHasQueue + `)`)).
				WithReinvocationPolicy(admissionv1.NeverReinvocationPolicy).
				WithMutations(admissionac.Mutation().
					WithPatchType(admissionv1.PatchTypeApplyConfiguration).
					WithApplyConfiguration(admissionac.ApplyConfiguration().WithExpression(
						`Object{metadata: Object.metadata{labels: {"` + KAIQueueLabel + `": "` + leaf + `"}}}`))))
		g.MutatingBinding = admissionac.MutatingAdmissionPolicyBinding(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.MutatingAdmissionPolicyBindingSpec().
				WithPolicyName(name).
				WithMatchResources(admissionac.MatchResources().WithNamespaceSelector(inNamespace)))
	}
	return g
}

// RenderNetworkPolicy isolates the tenant namespace: ingress only from pods
// in the same namespace and from the configured platform namespaces, so
// tenants sharing the host cluster cannot reach each other. Egress stays
// open; the vCluster syncer must reach the host API server.
func RenderNetworkPolicy(vc VirtualCluster, s Settings) *networkingac.NetworkPolicyApplyConfiguration {
	peers := []*networkingac.NetworkPolicyPeerApplyConfiguration{
		networkingac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector()),
	}
	for _, ns := range s.IngressNamespaces {
		peers = append(peers, networkingac.NetworkPolicyPeer().WithNamespaceSelector(
			metav1ac.LabelSelector().WithMatchLabels(map[string]string{namespaceNameLabel: ns})))
	}
	return networkingac.NetworkPolicy(NetworkPolicyName, NamespaceName(vc.Name)).
		WithLabels(commonLabels(vc)).
		WithAnnotations(generationAnnotations(vc)).
		WithSpec(networkingac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector()).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(networkingac.NetworkPolicyIngressRule().WithFrom(peers...)))
}

// tolerationFor is the vCluster enforceTolerations string for a pool taint.
func tolerationFor(s Settings) string {
	return fmt.Sprintf("%s=%s:%s", s.PoolLabel, s.DedicatedPool, corev1.TaintEffectNoSchedule)
}
