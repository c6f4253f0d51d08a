package hostcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
)

// The hostile-tenant suite: pods as the vCluster syncer would write them to
// the host for a tenant who tries every known way out of its queue, quota
// and node pool, sent to the real kube-apiserver while impersonating the
// syncer's ServiceAccount, which holds exactly the RBAC the vCluster chart
// gives it (the chart is really installed). So only admission decides:
// gpuplane's policies, Pod Security Admission and the ResourceQuota the
// chart renders from the leaf queue's limit.
//
// Every case has a verdict for four virtual clusters: a SHARED team, a
// DEDICATED team (own pool dedicated-<team>) and a SHARED team whose tier
// profile enforces Pod Security "restricted", all on the default vCluster
// chart (0.36.1), and a SHARED team still on chart 0.20 (virtual clusters
// keep their chart until upgraded), whose verdicts are the SHARED ones
// unless a case says otherwise. Creates are server-side dry runs
// (admission runs in full, nothing is stored, so quota usage does not
// accumulate between cases); update cases create a real pod first.
//
// What is real: API server, admission (CEL policies, PSA, ResourceQuota,
// Priority), RBAC, the vCluster chart's Role. What is modelled: the syncer
// (no vCluster runs here; pods are built the way its translator builds them:
// name <pod>-x-<namespace>-x-<vcluster>, vcluster.loft.sh/* labels and
// annotations, workload ServiceAccount, the DEDICATED node selector and
// enforced toleration), the controllers that turn Deployments, Jobs and
// DaemonSets into pods, and KAI (its priority classes are created here; its
// binder's label write is an admin update).
//
// The case table with the exact messages is docs/isolation-cases.md, which
// this test keeps current (the README's Isolation section quotes it).

type target int

const (
	tShared target = iota
	tDedicated
	tRestricted
	// numVerdicts: a case spells out a verdict for each target above.
	numVerdicts
	// tOldChart is a SHARED virtual cluster on vCluster chart 0.20.
	tOldChart  = numVerdicts
	numTargets = tOldChart + 1
)

func (t target) String() string {
	return [...]string{"SHARED", "DEDICATED", "SHARED+restricted", "SHARED, chart 0.20"}[t]
}

// verdict: admit, or deny with a fragment the message must contain.
type verdict struct {
	admit bool
	want  string
}

var admit = verdict{admit: true}

func deny(fragment string) verdict { return verdict{want: fragment} }

// same gives every target one verdict.
func same(v verdict) [numVerdicts]verdict { return [numVerdicts]verdict{v, v, v} }

// verdict is what the case expects for target tg.
func (tc hostileCase) verdict(tg target) verdict {
	if tg == tOldChart {
		if tc.onOldChart != nil {
			return *tc.onOldChart
		}
		return tc.want[tShared]
	}
	return tc.want[tg]
}

type workload string

const (
	wPod        workload = "Pod"
	wDeployment workload = "Deployment"
	wJob        workload = "Job"
	wDaemonSet  workload = "DaemonSet"
)

// hostileEnv is what a case builder may use.
type hostileEnv struct {
	vc       VirtualCluster
	ownPool  string // the pool the virtual cluster may use
	ownQueue string
	// values are the vCluster chart values gpuplane rendered for vc.
	values map[string]any
}

// foreignPool and foreignQueue belong to another team.
const (
	foreignPool  = "dedicated-team-x"
	foreignQueue = "vc-team-x-prod"
)

type hostileCase struct {
	name string
	kind workload
	// virtual is the pod as the tenant's controller wrote it in the virtual
	// cluster; the syncer's translation is applied afterwards.
	virtual func(e hostileEnv, p *corev1.Pod)
	// update, when set, makes this an update case: the pod is created for
	// real (as the syncer), prepare (as an admin: KAI's binder) may change
	// it, then update changes it as the syncer and the verdict applies to
	// that update.
	prepare func(p *corev1.Pod)
	update  func(e hostileEnv, p *corev1.Pod)
	// noPin builds the host pod without the DEDICATED node selector, as a
	// misconfigured syncer would.
	noPin bool
	want  [numVerdicts]verdict
	// onOldChart, when set, is the verdict on chart 0.20 (else SHARED's).
	onOldChart *verdict
}

func gpuContainer(n string) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{NvidiaGPUResource: resource.MustParse(n)}
	}
}

// kaiGPU is a well-formed GPU pod: KAI scheduler, own queue, n GPUs.
func kaiGPU(n string, more ...func(e hostileEnv, p *corev1.Pod)) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) {
		p.Spec.SchedulerName = KAISchedulerName
		p.Labels[KAIQueueLabel] = e.ownQueue
		gpuContainer(n)(e, p)
		for _, m := range more {
			m(e, p)
		}
	}
}

func tolerate(key string, op corev1.TolerationOperator, value string, effect corev1.TaintEffect) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	}
}

func selectPool(pool string) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) {
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector[DefaultPoolLabel] = pool
	}
}

func nodeAffinity(required bool, op corev1.NodeSelectorOperator, values ...string) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) {
		term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "nvidia.com/gpu.present", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}},
			{Key: DefaultPoolLabel, Operator: op, Values: values},
		}}
		na := &corev1.NodeAffinity{}
		if required {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}
		} else {
			na.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: term}}
		}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: na}
	}
}

func label(k, v string) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) { p.Labels[k] = v }
}

func annotate(k, v string) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) { p.Annotations[k] = v }
}

func all(fs ...func(e hostileEnv, p *corev1.Pod)) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) {
		for _, f := range fs {
			f(e, p)
		}
	}
}

func own(f func(pool string) func(e hostileEnv, p *corev1.Pod)) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) { f(e.ownPool)(e, p) }
}

func container(f func(c *corev1.Container)) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) { f(&p.Spec.Containers[0]) }
}

var hostileCases = []hostileCase{
	// Legitimate workloads: must still run.
	{name: "plain CPU pod", kind: wPod, virtual: func(hostileEnv, *corev1.Pod) {}, want: same(admit)},
	{name: "GPU pod in its own queue", kind: wPod, virtual: kaiGPU("1"), want: same(admit)},
	{name: "GPU pod without queue label (policy adds it)", kind: wPod, virtual: all(gpuContainer("1"), func(_ hostileEnv, p *corev1.Pod) {
		p.Spec.SchedulerName = KAISchedulerName
	}), want: same(admit)},
	{name: "Deployment pod with a GPU", kind: wDeployment, virtual: kaiGPU("1"), want: same(admit)},
	{name: "Job pod with 2 GPUs", kind: wJob, virtual: kaiGPU("2"), want: same(admit)},
	{name: "DaemonSet pod (node affinity by name, DaemonSet tolerations)", kind: wDaemonSet, virtual: func(hostileEnv, *corev1.Pod) {}, want: same(admit)},
	{name: "MIG slice with KAI in own queue", kind: wPod, virtual: all(kaiGPU("0"), container(func(c *corev1.Container) {
		c.Resources.Limits = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}
	})), want: same(admit)},
	{name: "tolerates nvidia.com/gpu taint", kind: wPod, virtual: kaiGPU("1", tolerate(NvidiaGPUResource, corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)), want: same(admit)},
	{name: "gpu-fraction 0.5 with KAI", kind: wPod, virtual: all(kaiGPU("0"), annotate(KAIFractionAnnot, "0.5")),
		want:       [numVerdicts]verdict{admit, deny("is in the DEDICATED tier, and KAI does not isolate GPU memory"), admit},
		onOldChart: &oldChartNoSharedGPUs},
	{name: "gpu-memory 2000 with KAI", kind: wPod, virtual: all(kaiGPU("0"), annotate(KAIGPUMemoryAnnot, "2000")),
		want:       [numVerdicts]verdict{admit, deny("shared-GPU annotations (gpu-fraction, gpu-memory) are refused"), admit},
		onOldChart: &oldChartNoSharedGPUs},
	{name: "CoreDNS pod as the syncer deploys it, with gpuplane's values", kind: wDeployment, virtual: corednsPod(true), want: same(admit)},
	{name: "priority class train", kind: wPod, virtual: kaiGPU("1", func(_ hostileEnv, p *corev1.Pod) { p.Spec.PriorityClassName = PriorityTrain }), want: same(admit)},
	{name: "priorityClassName label build-preemptible", kind: wJob, virtual: kaiGPU("1", label(KAIPriorityLabel, PriorityBuildPreemptible)), want: same(admit)},
	{name: "preemptibility label preemptible", kind: wPod, virtual: kaiGPU("1", label(KAIPreemptibilityLabel, Preemptible)), want: same(admit)},
	{name: "node selector naming its own pool", kind: wPod, virtual: kaiGPU("1", own(selectPool)), want: same(admit)},
	{name: "required affinity In its own pool", kind: wPod, virtual: kaiGPU("1", func(e hostileEnv, p *corev1.Pod) {
		nodeAffinity(true, corev1.NodeSelectorOpIn, e.ownPool)(e, p)
	}), want: same(admit)},

	// Priority classes and preemptibility per tier.
	{name: "priority class inference (non-preemptible)", kind: wDeployment, virtual: kaiGPU("1", func(_ hostileEnv, p *corev1.Pod) { p.Spec.PriorityClassName = PriorityInference }),
		want: [numVerdicts]verdict{deny(`priority class "inference" is not allowed for virtual cluster`), admit, deny(`priority class "inference" is not allowed`)}},
	{name: "priorityClassName label inference (KAI reads it first)", kind: wPod, virtual: kaiGPU("1", label(KAIPriorityLabel, PriorityInference)),
		want: [numVerdicts]verdict{deny("label priorityClassName=inference is not allowed"), admit, deny("label priorityClassName=inference is not allowed")}},
	{name: "preemptibility label forged non-preemptible", kind: wPod, virtual: kaiGPU("1", label(KAIPreemptibilityLabel, NonPreemptible)),
		want: [numVerdicts]verdict{deny("label kai.scheduler/preemptibility=non-preemptible is not allowed"), admit, deny("kai.scheduler/preemptibility=non-preemptible")}},
	{name: "preemptibility label with a made-up value", kind: wPod, virtual: kaiGPU("1", label(KAIPreemptibilityLabel, "never")),
		want: same(deny("label kai.scheduler/preemptibility=never is not allowed"))},
	// The cluster's own classes: vCluster 0.36 syncs them whatever its
	// priority class selector says, so only the guardrail stops them.
	{name: "priority class system-node-critical", kind: wDaemonSet, virtual: func(_ hostileEnv, p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" },
		want: same(deny(`priority class "system-node-critical" is not allowed`))},
	{name: "priority class system-cluster-critical on a GPU pod", kind: wDeployment, virtual: kaiGPU("1", func(_ hostileEnv, p *corev1.Pod) {
		p.Spec.PriorityClassName = "system-cluster-critical"
	}), want: same(deny(`priority class "system-cluster-critical" is not allowed`))},
	{name: "priorityClassName label system-node-critical", kind: wPod, virtual: kaiGPU("1", label(KAIPriorityLabel, "system-node-critical")),
		want: same(deny("label priorityClassName=system-node-critical is not allowed"))},

	// Skipping the scheduler.
	{name: "preset spec.nodeName on a GPU pod", kind: wPod, virtual: kaiGPU("1", func(_ hostileEnv, p *corev1.Pod) { p.Spec.NodeName = "gpu-node-7" }),
		want: same(deny(`spec.nodeName is preset to "gpu-node-7"`))},
	{name: "preset spec.nodeName on a Job pod", kind: wJob, virtual: func(_ hostileEnv, p *corev1.Pod) { p.Spec.NodeName = "gpu-node-7" },
		want: same(deny("must go through a scheduler"))},

	// Tolerations and placement.
	{name: "toleration {operator: Exists} without key", kind: wPod, virtual: kaiGPU("1", tolerate("", corev1.TolerationOpExists, "", "")),
		want: same(deny("a toleration with operator Exists and no key tolerates every taint"))},
	{name: "toleration Exists without key, effect NoSchedule", kind: wDeployment, virtual: tolerate("", corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule),
		want: same(deny("operator Exists and no key"))},
	{name: "DaemonSet tolerating everything", kind: wDaemonSet, virtual: tolerate("", corev1.TolerationOpExists, "", ""),
		want: same(deny("operator Exists and no key"))},
	{name: "toleration of another team's dedicated pool + its node selector", kind: wPod,
		virtual: kaiGPU("1", tolerate(DefaultPoolLabel, corev1.TolerationOpEqual, foreignPool, corev1.TaintEffectNoSchedule), selectPool(foreignPool)),
		want:    same(deny("toleration of taint gpuplane.io/pool=" + foreignPool + " is refused"))},
	{name: "toleration of the pool taint with operator Exists", kind: wDeployment, virtual: kaiGPU("1", tolerate(DefaultPoolLabel, corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)),
		want: same(deny("gpuplane.io/pool with operator Exists (every pool)"))},
	{name: "toleration of the control-plane taint", kind: wPod, virtual: tolerate(ControlPlaneTaintKey, corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule),
		want: same(deny("toleration of taint key node-role.kubernetes.io/control-plane is refused"))},
	{name: "node selector naming another team's pool", kind: wJob, virtual: kaiGPU("1", selectPool(foreignPool)),
		// DEDICATED: the syncer overwrites the pool key with its own pool.
		want: [numVerdicts]verdict{deny("nodeSelector gpuplane.io/pool=" + foreignPool + " is refused"), admit, deny("nodeSelector gpuplane.io/pool=" + foreignPool)}},
	{name: "required affinity In another team's pool", kind: wPod, virtual: kaiGPU("1", nodeAffinity(true, corev1.NodeSelectorOpIn, foreignPool)),
		want: same(deny("node affinity gpuplane.io/pool In [" + foreignPool + "] is refused"))},
	{name: "preferred affinity In another team's pool", kind: wDeployment, virtual: kaiGPU("1", nodeAffinity(false, corev1.NodeSelectorOpIn, foreignPool)),
		want: same(deny("node affinity gpuplane.io/pool In [" + foreignPool + "] is refused"))},
	{name: "required affinity NotIn the shared pool", kind: wPod, virtual: kaiGPU("1", nodeAffinity(true, corev1.NodeSelectorOpNotIn, DefaultPool)),
		want: same(deny("node affinity gpuplane.io/pool NotIn [shared] is refused"))},
	{name: "preferred affinity Exists on the pool label", kind: wPod, virtual: kaiGPU("1", nodeAffinity(false, corev1.NodeSelectorOpExists)),
		want: same(deny("node affinity gpuplane.io/pool Exists is refused"))},
	{name: "required affinity In the shared pool", kind: wPod, virtual: kaiGPU("1", nodeAffinity(true, corev1.NodeSelectorOpIn, DefaultPool)),
		want: [numVerdicts]verdict{admit, deny("node affinity gpuplane.io/pool In [shared] is refused"), admit}},
	{name: "DEDICATED pod without its pool's node selector (syncer misconfigured)", kind: wPod, virtual: kaiGPU("1"), noPin: true,
		want: [numVerdicts]verdict{admit, deny("must carry nodeSelector gpuplane.io/pool=dedicated-team-d"), admit}},

	// Queues and schedulers.
	{name: "GPU pod naming another team's queue", kind: wPod, virtual: kaiGPU("1", label(KAIQueueLabel, foreignQueue)),
		want: same(deny(`label kai.scheduler/queue must be "`))},
	{name: "CPU pod naming default-queue", kind: wPod, virtual: label(KAIQueueLabel, "default-queue"), want: same(deny(`(got "default-queue")`))},
	{name: "GPU pod without schedulerName", kind: wDeployment, virtual: gpuContainer("1"),
		want: same(deny(`pods using GPUs must set spec.schedulerName: kai-scheduler (got "default-scheduler")`))},
	{name: "GPU in an init container with another scheduler", kind: wJob, virtual: func(_ hostileEnv, p *corev1.Pod) {
		p.Spec.SchedulerName = "my-scheduler"
		p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "busybox", SecurityContext: p.Spec.Containers[0].SecurityContext,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{NvidiaGPUResource: resource.MustParse("1")}}}}
	}, want: same(deny(`(got "my-scheduler")`))},
	{name: "MIG slice without KAI", kind: wPod, virtual: container(func(c *corev1.Container) {
		c.Resources.Limits = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}
	}), want: same(deny("pods using GPUs must set spec.schedulerName"))},
	{name: "gpu-fraction without KAI", kind: wPod, virtual: annotate(KAIFractionAnnot, "0.5"), want: same(deny("pods using GPUs must set spec.schedulerName"))},
	{name: "more GPUs than the leaf queue's limit", kind: wJob, virtual: kaiGPU("5"), want: same(deny("exceeded quota"))},

	// KAI's GPU-sharing group label.
	{name: "runai-gpu-group forged on create", kind: wPod, virtual: label(KAIGPUGroupLabel, "group-of-another-tenant"),
		want: same(deny("label runai-gpu-group is set only by KAI's binder"))},
	{name: "runai-gpu-group changed by the syncer", kind: wPod, virtual: func(hostileEnv, *corev1.Pod) {},
		prepare: func(p *corev1.Pod) { p.Labels[KAIGPUGroupLabel] = "g-1" },
		update:  func(_ hostileEnv, p *corev1.Pod) { p.Labels[KAIGPUGroupLabel] = "g-2" },
		want:    same(deny(`may not change or remove it (was "g-1", now "g-2")`))},
	{name: "runai-gpu-group stripped by the syncer", kind: wPod, virtual: func(hostileEnv, *corev1.Pod) {},
		prepare: func(p *corev1.Pod) { p.Labels[KAIGPUGroupLabel] = "g-1" },
		update:  func(_ hostileEnv, p *corev1.Pod) { delete(p.Labels, KAIGPUGroupLabel) },
		want:    same(deny(`(was "g-1", now absent)`))},
	{name: "syncer update keeping runai-gpu-group", kind: wPod, virtual: func(hostileEnv, *corev1.Pod) {},
		prepare: func(p *corev1.Pod) { p.Labels[KAIGPUGroupLabel] = "g-1" },
		update:  func(_ hostileEnv, p *corev1.Pod) { p.Labels["app"] = "relabelled" },
		want:    same(admit)},
	{name: "syncer update adding a toleration Exists", kind: wPod, virtual: func(hostileEnv, *corev1.Pod) {},
		update: tolerate("", corev1.TolerationOpExists, "", ""),
		want:   same(deny("operator Exists and no key"))},
	{name: "gated pod: update adds another team's pool selector", kind: wPod, virtual: func(_ hostileEnv, p *corev1.Pod) {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
	}, update: selectPool(foreignPool),
		// DEDICATED: the pod already selects its pool, and the API server
		// allows only additions to a gated pod's node selector.
		want: [numVerdicts]verdict{deny("nodeSelector gpuplane.io/pool=" + foreignPool + " is refused"), deny("only additions to spec.nodeSelector are allowed"),
			deny("nodeSelector gpuplane.io/pool=" + foreignPool + " is refused")}},

	// Pod Security Admission (baseline by default, restricted by profile).
	{name: "privileged container", kind: wDaemonSet, virtual: container(func(c *corev1.Container) {
		c.SecurityContext.Privileged = ptr.To(true)
		c.SecurityContext.AllowPrivilegeEscalation = nil
	}), want: same(deny(`violates PodSecurity`))},
	{name: "hostPath volume", kind: wPod, virtual: func(_ hostileEnv, p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet"}}})
	}, want: [numVerdicts]verdict{deny(`hostPath volumes (volume "host")`), deny(`hostPath volumes (volume "host")`), deny(`volume "host" uses restricted volume type "hostPath"`)}},
	{name: "hostNetwork", kind: wDeployment, virtual: func(_ hostileEnv, p *corev1.Pod) { p.Spec.HostNetwork = true }, want: same(deny("host namespaces (hostNetwork=true)"))},
	{name: "runs as root", kind: wPod, virtual: func(_ hostileEnv, p *corev1.Pod) {
		p.Spec.SecurityContext.RunAsNonRoot = nil
		p.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
	}, want: [numVerdicts]verdict{admit, admit, deny(`violates PodSecurity "restricted:latest": runAsNonRoot != true`)}},
	{name: "capabilities not dropped", kind: wJob, virtual: container(func(c *corev1.Container) { c.SecurityContext.Capabilities = nil }),
		want: [numVerdicts]verdict{admit, admit, deny(`unrestricted capabilities (container "main" must set securityContext.capabilities.drop=["ALL"])`)}},
	{name: "CoreDNS pod without a pod seccomp profile (the chart's default)", kind: wDeployment, virtual: corednsPod(false),
		want: [numVerdicts]verdict{admit, admit, deny(`seccompProfile (pod or container "coredns" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`)}},
}

// oldChartNoSharedGPUs: a virtual cluster on chart 0.20 that asked for
// fractional GPUs gets them refused until it is upgraded.
var oldChartNoSharedGPUs = deny("runs vCluster chart 0.20.0, whose syncer drops runai-gpu-group (the GPU-sharing group set by KAI) from host pods; it must be upgraded to chart 0.36.1 first")

// corednsPod is the CoreDNS pod the vCluster syncer deploys inside the
// virtual cluster, as it reaches the host: its container as vCluster's
// template writes it (pkg/coredns/template.go in the 0.36.1 module, the
// same in 0.20's chart: non-root as the syncer's user, or 1001 when the
// syncer is root; only NET_BIND_SERVICE; read-only root), and the pod
// security context gpuplane rendered into controlPlane.coredns.security,
// which the template uses instead of none (withValues false: the chart's
// default, no seccomp profile).
func corednsPod(withValues bool) func(e hostileEnv, p *corev1.Pod) {
	return func(e hostileEnv, p *corev1.Pod) {
		uid := int64(1001)
		if cp, _ := e.values["controlPlane"].(map[string]any); cp != nil {
			if _, ok := cp["coredns"]; ok {
				uid = ControlPlaneUID
			}
		}
		p.Labels["k8s-app"] = "vcluster-kube-dns"
		p.Spec.SecurityContext = nil
		if cp, _ := e.values["controlPlane"].(map[string]any); withValues && cp != nil {
			if sec, _ := cp["coredns"].(map[string]any); sec != nil {
				raw, _ := json.Marshal(sec["security"].(map[string]any)["podSecurityContext"])
				p.Spec.SecurityContext = &corev1.PodSecurityContext{}
				if err := json.Unmarshal(raw, p.Spec.SecurityContext); err != nil {
					panic(err)
				}
			}
		}
		p.Spec.Containers[0] = corev1.Container{
			Name: "coredns", Image: "coredns/coredns:1.12.1", Args: []string{"-conf", "/etc/coredns/Corefile"},
			Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 1053, Protocol: corev1.ProtocolUDP}},
			SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid), AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:           &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
				ReadOnlyRootFilesystem: ptr.To(true),
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
		}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "config-volume", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}})
	}
}

func TestHostileTenants(t *testing.T) {
	h := newHarness(t)
	createKAIPriorityClasses(t, h)
	dept := h.n("hostile")
	vcs := [numTargets]VirtualCluster{
		tShared:     testVC(h.n("hs-shared"), "team-s", dept, TierShared),
		tDedicated:  testVC(h.n("hs-ded"), "team-d", dept, TierDedicated),
		tRestricted: testVC(h.n("hs-restricted"), "team-r", dept, TierShared),
		tOldChart:   oldVC(h.n("hs-old"), "team-o", dept, TierShared),
	}
	restricted := h.client.settings
	restricted.TierProfiles = map[string]TierProfile{TierShared: DefaultTierProfiles()[TierShared]}
	p := restricted.TierProfiles[TierShared]
	p.PodSecurity = PodSecurityRestricted
	restricted.TierProfiles[TierShared] = p
	restrictedClient, err := New(h.config, Options{Settings: restricted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restrictedClient.Close)
	clients := [numTargets]*Client{h.client, h.client, restrictedClient, h.client}
	syncers := [numTargets]kubernetes.Interface{}
	for i, vc := range vcs {
		if _, err := clients[i].Apply(h.ctx, vc); err != nil {
			t.Fatalf("apply %s (%s): %v", vc.Name, target(i), err)
		}
		h.markQuotaObserved(vc)
		syncers[i] = h.impersonateSyncer(vc)
	}
	assertRestrictedControlPlane(t, h, restrictedClient, vcs[tRestricted], dept)
	assertNoTypeWarnings(t, h)

	type row struct {
		name     string
		kind     workload
		verdicts [numTargets]string
	}
	var report []row
	for _, tc := range hostileCases {
		r := row{name: tc.name, kind: tc.kind}
		for tg := range numTargets {
			vc := vcs[tg]
			e := hostileEnv{vc: vc, ownPool: vc.pool(), ownQueue: LeafQueueName(vc.Name),
				values: RenderVClusterValues(vc, clients[tg].settings)}
			want := tc.verdict(tg)
			t.Run(fmt.Sprintf("%s/%s", tc.name, tg), func(t *testing.T) {
				got, err := runHostileCase(h, syncers[tg], e, tc)
				r.verdicts[tg] = describeVerdict(err)
				checkVerdict(t, e, want, got, err)
			})
		}
		report = append(report, r)
	}
	if len(hostileCases) < 30 {
		t.Errorf("the suite must keep at least 30 cases, has %d", len(hostileCases))
	}
	var b strings.Builder
	b.WriteString(isolationDocHeader)
	fmt.Fprintf(&b, "| # | case | workload | %s | %s | %s | %s |\n|---|---|---|---|---|---|---|\n", tShared, tDedicated, tRestricted, tOldChart)
	for i, r := range report {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", i+1, r.name, r.kind, r.verdicts[0], r.verdicts[1], r.verdicts[2], r.verdicts[3])
	}
	checkGolden(t, h, isolationDoc, b.String())
}

// checkVerdict compares what the API server did with a case's verdict.
func checkVerdict(t *testing.T, e hostileEnv, want verdict, got *corev1.Pod, err error) {
	t.Helper()
	if want.admit {
		if err != nil {
			t.Fatalf("refused, want admitted: %v", err)
		}
		if got != nil && (got.Spec.SchedulerName == KAISchedulerName) && got.Labels[KAIQueueLabel] != e.ownQueue {
			t.Errorf("admitted KAI pod is in queue %q, want %q", got.Labels[KAIQueueLabel], e.ownQueue)
		}
		return
	}
	if err == nil {
		t.Fatalf("admitted, want refused with %q", want.want)
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("refused with %v, want Forbidden", err)
	}
	if !strings.Contains(err.Error(), want.want) {
		t.Errorf("message\n  %s\ndoes not contain\n  %s", err, want.want)
	}
}

// assertRestrictedControlPlane: under a "restricted" tier the chart-0.36.1
// control plane installs (Apply above) because its StatefulSet's pod meets
// the level, which the release step checked with a dry run of that very pod
// (checkControlPlaneAdmitted) — asserted here not to have passed for want
// of a StatefulSet. On chart 0.20, whose control plane runs as root, the
// release step fails with Pod Security's reason instead of leaving a
// control plane that never starts.
func assertRestrictedControlPlane(t *testing.T, h *harness, c *Client, vc VirtualCluster, dept string) {
	t.Helper()
	sts, err := h.kube.AppsV1().StatefulSets(NamespaceName(vc.Name)).Get(h.ctx, ReleaseName(vc.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("restricted tier, chart %s: the control plane StatefulSet: %v", vc.ChartVersion, err)
	}
	psc := sts.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
		t.Errorf("restricted tier: control plane pod security context %+v", psc)
	}
	for _, ctr := range append(sts.Spec.Template.Spec.InitContainers, sts.Spec.Template.Spec.Containers...) {
		if sc := ctr.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != ControlPlaneUID {
			t.Errorf("restricted tier: container %s security context %+v", ctr.Name, sc)
		}
	}
	if err := c.checkControlPlaneAdmitted(h.ctx, vc); err != nil {
		t.Errorf("restricted tier, chart %s: %v", vc.ChartVersion, err)
	}

	old := oldVC(h.n("hs-restricted-old"), "team-r", dept, TierShared)
	steps, err := c.Apply(h.ctx, old)
	failed, _ := steps.Failed()
	if err == nil || failed.Step != StepRelease || !strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`) ||
		!strings.Contains(err.Error(), "cannot run in namespace") {
		t.Fatalf("apply %s (chart 0.20) under restricted: %v, want the release step to report the control plane's Pod Security violation", old.Name, err)
	}
	t.Logf("restricted tier, chart 0.20, release step: %v", failed.Err)
}

// isolationDoc is the generated case table the README links to; the suite
// fails when it is stale. Regenerate with GPUPLANE_UPDATE_GOLDEN=1.
const isolationDoc = "../../docs/isolation-cases.md"

const isolationDocHeader = `# Hostile-tenant suite: every case and the answer

Generated by ` + "`TestHostileTenants`" + ` (internal/hostcluster/hostile_test.go) on a real
kube-apiserver; regenerate with ` + "`GPUPLANE_UPDATE_GOLDEN=1 make test`" + `. Each row is
a pod as the vCluster syncer writes it to the host (for Deployments, Jobs and
DaemonSets: the pod their controller makes, as the syncer copies it), sent as
the syncer's ServiceAccount. Virtual clusters on vCluster chart 0.36.1: hs-shared
(SHARED, Pod Security baseline), hs-ded (DEDICATED, pool dedicated-team-d),
hs-restricted (SHARED with a "restricted" profile); and hs-old (SHARED, chart
0.20, created with fractional GPUs before 0.36.1 was offered). "refused:" cells are the exact message the API
server returns (after ` + "`pods \"<name>\" is forbidden: `" + `); the syncer records it as
an event on the tenant's pod in the virtual cluster.

`

// checkGolden compares got with the file at path, or writes it when
// GPUPLANE_UPDATE_GOLDEN is set. Only a test's first run compares: names
// carry a suffix when -count repeats it.
func checkGolden(t *testing.T, h *harness, path, got string) {
	t.Helper()
	if os.Getenv("GPUPLANE_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if h.sfx != "" {
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it with GPUPLANE_UPDATE_GOLDEN=1)", err)
	}
	if string(want) != got {
		t.Errorf("%s is stale: the suite's answers changed; regenerate it with GPUPLANE_UPDATE_GOLDEN=1 and review the diff", path)
	}
}

// describeVerdict is the report's cell: admitted, or the message a tenant
// sees (the API server's prefix naming the pod trimmed).
func describeVerdict(err error) string {
	if err == nil {
		return "admitted"
	}
	msg := apiPrefix.ReplaceAllString(err.Error(), "")
	return "refused: " + strings.ReplaceAll(msg, "|", `\|`)
}

// apiPrefix is the API server's "pods "<name>" is forbidden: " (or "Pod
// "<name>" is invalid: ") before the reason.
var apiPrefix = regexp.MustCompile(`^(pods|Pod) "[^"]*" is (forbidden|invalid): `)

var hostileSeq int

// runHostileCase builds the host pod the syncer would write and sends it as
// the syncer: a dry-run create, or for update cases a real create (as the
// syncer), the optional admin change, then the syncer's update.
func runHostileCase(h *harness, syncer kubernetes.Interface, e hostileEnv, tc hostileCase) (*corev1.Pod, error) {
	hostileSeq++
	p := syncedPod(e, tc.kind, fmt.Sprintf("w%d", hostileSeq), tc.virtual, tc.noPin)
	pods := syncer.CoreV1().Pods(NamespaceName(e.vc.Name))
	if tc.update == nil {
		return pods.Create(h.ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	created, err := pods.Create(h.ctx, p, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("update case %q: creating the pod to update: %v", tc.name, err)
	}
	if tc.prepare != nil {
		tc.prepare(created) // KAI's binder: an admin write, not the syncer
		if created, err = h.kube.CoreV1().Pods(created.Namespace).Update(h.ctx, created, metav1.UpdateOptions{}); err != nil {
			h.t.Fatalf("update case %q: KAI's label write must be admitted: %v", tc.name, err)
		}
	}
	tc.update(e, created)
	return pods.Update(h.ctx, created, metav1.UpdateOptions{})
}

// syncedPod builds the host pod the vCluster syncer writes for a pod of
// kind in the virtual namespace "default": the controller's part first
// (labels, restart policy, DaemonSet placement), then the tenant's
// virtual(), then the syncer's translation.
func syncedPod(e hostileEnv, kind workload, workloadName string, virtual func(hostileEnv, *corev1.Pod), noPin bool) *corev1.Pod {
	vName := workloadName
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": workloadName}, Annotations: map[string]string{}},
		Spec:       restrictedPodSpec("main", "registry.example.com/train:1"),
	}
	p.Spec.SecurityContext.RunAsUser = ptr.To[int64](1000)
	owner := ""
	switch kind {
	case wDeployment:
		vName = workloadName + "-7d9f8b6c5d-x2k4p"
		p.Labels["pod-template-hash"] = "7d9f8b6c5d"
		owner = "ReplicaSet"
	case wJob:
		vName = workloadName + "-q7w2m"
		p.Labels["batch.kubernetes.io/job-name"] = workloadName
		p.Labels["batch.kubernetes.io/controller-uid"] = "0b6f3c2e-8f0e-4c53-9c1e-2f5d1a7b9e10"
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		owner = "Job"
	case wDaemonSet:
		vName = workloadName + "-h5z9c"
		p.Labels["controller-revision-hash"] = "6c9b7f5d8"
		p.Labels["pod-template-generation"] = "1"
		owner = "DaemonSet"
		// What the DaemonSet controller adds: the node by name, and
		// tolerations of the node-condition taints.
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-node-1"}}},
			}}},
		}}
		for _, taint := range []struct {
			key    string
			effect corev1.TaintEffect
		}{
			{"node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute}, {"node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute},
			{"node.kubernetes.io/disk-pressure", corev1.TaintEffectNoSchedule}, {"node.kubernetes.io/memory-pressure", corev1.TaintEffectNoSchedule},
			{"node.kubernetes.io/pid-pressure", corev1.TaintEffectNoSchedule}, {"node.kubernetes.io/unschedulable", corev1.TaintEffectNoSchedule},
		} {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: taint.key, Operator: corev1.TolerationOpExists, Effect: taint.effect})
		}
	}
	virtual(e, p)

	// The syncer (vCluster pods translator, single-namespace mode).
	p.Name = vName + "-x-default-x-" + e.vc.Name
	p.Namespace = NamespaceName(e.vc.Name)
	p.Labels[vclusterMarkerLabel] = e.vc.Name
	p.Labels["vcluster.loft.sh/namespace"] = "default"
	p.Annotations["vcluster.loft.sh/object-name"] = vName
	p.Annotations["vcluster.loft.sh/object-namespace"] = "default"
	p.Annotations["vcluster.loft.sh/object-kind"] = "/v1, Kind=Pod"
	if owner != "" {
		p.Annotations["vcluster.loft.sh/owner-set-kind"] = owner
	}
	p.Spec.ServiceAccountName = "vc-workload-" + e.vc.Name
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	if e.vc.Tier == TierDedicated || e.vc.Tier == TierSandbox {
		if !noPin && p.Spec.NodeName == "" {
			selectPool(e.ownPool)(e, p) // sync.fromHost.nodes.selector.labels
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{ // sync.toHost.pods.enforceTolerations
			Key: DefaultPoolLabel, Operator: corev1.TolerationOpEqual, Value: e.ownPool, Effect: corev1.TaintEffectNoSchedule})
	}
	return p
}

// impersonateSyncer returns a client acting as the virtual cluster's
// syncer ServiceAccount, whose only rights are the chart's Role.
func (h *harness) impersonateSyncer(vc VirtualCluster) kubernetes.Interface {
	h.t.Helper()
	ns, _ := SyncerServiceAccount(vc.Name)
	cfg := rest.CopyConfig(h.config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: SyncerUsername(vc.Name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	// RBAC is real: the chart's Role lets the syncer write pods in its own
	// namespace and nowhere else.
	_, err := kube.CoreV1().Pods("default").Create(h.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "escape"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot create resource") {
		h.t.Fatalf("the syncer of %s must not create pods outside its namespace: %v", vc.Name, err)
	}
	return kube
}

// createKAIPriorityClasses plays KAI's installation, which creates its four
// priority classes (the Priority admission plugin refuses unknown names).
func createKAIPriorityClasses(t *testing.T, h *harness) {
	for name, value := range map[string]int32{PriorityTrain: 50, PriorityBuildPreemptible: 75, PriorityBuild: 100, PriorityInference: 125} {
		_, err := h.kube.SchedulingV1().PriorityClasses().Create(h.ctx, &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value, PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// assertNoTypeWarnings type-checks the validating policies against the
// Pod schema the API server publishes, with the type checker the API
// server's own status controller runs (in kube-controller-manager, which
// envtest lacks). A CEL expression with a type warning may fail at runtime
// and, with failurePolicy Fail, refuse every pod.
func assertNoTypeWarnings(t *testing.T, h *harness) {
	t.Helper()
	dc := discovery.NewDiscoveryClientForConfigOrDie(h.config)
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	checker := validating.TypeChecker{
		SchemaResolver: &resolver.ClientDiscoveryResolver{Discovery: dc},
		RestMapper:     restmapper.NewDiscoveryRESTMapper(groups),
	}
	// One shared validating policy guards every virtual cluster.
	vap, err := h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(h.ctx, GuardrailsPolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range checker.Check(vap) {
		t.Errorf("policy %s: %s: %s", vap.Name, w.FieldRef, w.Warning)
	}
	// The checker must be able to fail: a misspelt field is a warning.
	broken := vap.DeepCopy()
	broken.Spec.Validations[0].Expression = "object.spec.nodeNmae == ''"
	if len(checker.Check(broken)) == 0 {
		t.Error("type checker reports nothing for a misspelt field; it checks nothing")
	}
}
