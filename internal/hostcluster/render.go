package hostcluster

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// PodSecurityEnforceLabel sets the Pod Security Standard a namespace enforces.
const PodSecurityEnforceLabel = "pod-security.kubernetes.io/enforce"

// RenderNamespace renders the host namespace.
//
//   - Pod Security is enforced at the tier's level (TierProfile.PodSecurity,
//     baseline by default): every tenant pod lands here through the vCluster
//     syncer, and without it a tenant could run privileged pods or mount
//     host paths on shared nodes.
//   - kai.scheduler/queue names the leaf queue: KAI's admission can be set
//     to act only on namespaces carrying it.
//   - GuardrailsLabel binds the shared admission guardrails, and the
//     guardrail parameters (GuardrailParams, as annotations under
//     GuardrailParamPrefix) are what they enforce here: the namespace is
//     guarded from the request that creates it (guardrails.go).
func RenderNamespace(vc VirtualCluster, s Settings, guardrails map[string]string) *corev1ac.NamespaceApplyConfiguration {
	labels := commonLabels(vc)
	labels[LabelTier] = vc.Tier
	labels[PodSecurityEnforceLabel] = s.Profile(vc.Tier).PodSecurity
	labels[KAIQueueLabel] = LeafQueueName(vc.Name)
	labels[GuardrailsLabel] = GuardrailsVersion
	annotations := generationAnnotations(vc)
	maps.Copy(annotations, guardrailAnnotations(guardrails))
	return corev1ac.Namespace(NamespaceName(vc.Name)).
		WithLabels(labels).
		WithAnnotations(annotations)
}

// RenderQueues renders the queue hierarchy parents first: department, team,
// leaf. Every resource is written with quota, overQuotaWeight and limit,
// because KAI reads an absent limit as 0 ("nothing allowed").
//
// With Settings.KAINodePoolLabel every node pool is a KAI node pool (a
// scheduling shard): each queue carries <label>=<pool>, and since a shard
// only sees its own queues, a virtual cluster outside the shared pool gets
// no department queue: its team queue is the root of its pool's hierarchy.
// Fair share then never crosses pools. The department's budget is still
// enforced by gpuplane's fit check.
func RenderQueues(vc VirtualCluster, s Settings) []*unstructured.Unstructured {
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
	leaf := vc.Leaf
	if vc.Sleep {
		leaf = SleepingLeaf(vc.Leaf)
	}
	l := base(LeafQueueName(vc.Name), LevelLeaf, vc.Name, team, leaf)
	unstructured.SetNestedField(l.Object, vc.Team, "metadata", "labels", LabelTeam)
	unstructured.SetNestedField(l.Object, vc.Name, "metadata", "labels", LabelVirtualCluster)
	unstructured.SetNestedField(l.Object, fmt.Sprint(vc.Generation), "metadata", "annotations", AnnotationGen)
	queues := []*unstructured.Unstructured{d, t, l}
	if key := s.KAINodePoolLabel; key != "" {
		for _, q := range queues {
			_ = unstructured.SetNestedField(q.Object, vc.pool(), "metadata", "labels", key)
		}
		if vc.pool() != DefaultPool {
			unstructured.RemoveNestedField(t.Object, "spec", "parentQueue")
			queues = queues[1:]
		}
	}
	return queues
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

// poolToleration is the vCluster enforceTolerations entry for the taint
// that fences a node pool.
func poolToleration(label, pool string) string {
	return fmt.Sprintf("%s=%s:%s", label, pool, corev1.TaintEffectNoSchedule)
}
