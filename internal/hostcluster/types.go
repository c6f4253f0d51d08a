// Package hostcluster turns a virtual cluster's desired state into objects on
// the shared host cluster and reads back what is really there. It renders
// (pure functions, unit-tested) and applies (server-side apply, field manager
// "gpuplane", Force) a namespace, the KAI Scheduler queue hierarchy,
// admission guardrails, a NetworkPolicy and the vCluster Helm release.
//
// It knows nothing about where the desired state comes from: callers fill a
// VirtualCluster (from Postgres, in gpuplane) and record the returned Steps
// and Observed as conditions.
//
// # Naming
//
// Every name is a DNS-1123 label of at most 63 characters, because the leaf
// queue name is also a label value (kai.scheduler/queue) and namespaces are
// labels too. Each level has its own prefix so that names can never collide
// across levels, even when a department, a team and a virtual cluster share
// a name:
//
//	host namespace    vc-<name>                  (one vCluster per namespace)
//	Helm release      <name> in vc-<name>        (= vCluster Service and StatefulSet)
//	kubeconfig Secret vc-<name> in vc-<name>     (written by vCluster itself)
//	department queue  dept-<department>
//	team queue        team-<department>-<team>   (teams are only unique per department)
//	leaf queue        vc-<name>                  (the only queue pods may name)
//	guardrails        gpuplane-guardrails-v1     (cluster-scoped admission policies shared by all)
//	NetworkPolicy     gpuplane-isolation in vc-<name>
//
// A virtual cluster name is therefore limited to 60 characters. A composed
// parent queue name that would exceed 63 characters is shortened and given a
// hash suffix, which keeps it unique and stable.
package hostcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// Quantities are resource amounts in the platform's integer units. GPUs are
// counted in hundredths so that fractional GPUs need no floating point.
type Quantities struct {
	GPUCenti    int64
	CPUMillis   int64
	MemoryBytes int64
}

// QueueSpec is one level of the KAI queue hierarchy.
//
// A negative value in Quota means "unlimited" (-1 in KAI); a negative value
// inside a non-nil Limit means "no limit" for that resource only. Priority 0
// means KAI's default, 100.
type QueueSpec struct {
	Quota           Quantities
	Limit           *Quantities // nil = no limit (-1) for every resource
	OverQuotaWeight float64
	Priority        int32
}

// VirtualCluster is the desired state of one tenant virtual cluster.
type VirtualCluster struct {
	Name             string // DNS-1123 label, unique platform-wide, e.g. "ml-dev"
	Team, Department string
	Tier             string // "SHARED" | "DEDICATED"
	// Pool is the node pool the virtual cluster's pods run on: the team's
	// own pool for DEDICATED (required), DefaultPool (or empty) for SHARED.
	Pool                string
	AllowFractionalGPUs bool
	Leaf                QueueSpec
	TeamQueue           QueueSpec
	DepartmentQueue     QueueSpec
	KubernetesVersion   string
	ChartVersion        string
	Generation          int64
	Members             []Member // for later OIDC RBAC inside the vcluster
	// SliceNodes are the nodes of the virtual cluster's pool as the host
	// shows them, for tiers whose virtual clusters run their own scheduler
	// (TierProfile.OwnScheduler): its pods may preset only these node
	// names. Apply fills it in; callers leave it empty.
	SliceNodes []string
	// Sleep: the control plane is scaled to zero, the workload pods the
	// syncer created are removed and the leaf queue admits nothing (KAI
	// limit 0); the namespace, guardrails, parent queues and the release
	// (with its data) stay.
	Sleep bool
}

// SleepingLeaf is the leaf queue of a sleeping virtual cluster: nothing
// guaranteed and a limit of 0 for every resource, which KAI reads as
// "nothing allowed at all", so nothing is scheduled while it sleeps.
func SleepingLeaf(awake QueueSpec) QueueSpec {
	return QueueSpec{Limit: &Quantities{}, Priority: awake.Priority}
}

// Member is a person or group with access to a virtual cluster.
type Member struct {
	Kind string // "user" | "group"
	Name string
	Role string // "OWNER" | "MEMBER" | "VIEWER"
}

// Isolation tiers.
const (
	TierShared    = "SHARED"
	TierDedicated = "DEDICATED"
	// TierSandbox: the virtual cluster runs its own scheduler on a fenced
	// slice of nodes (its own pool).
	TierSandbox = "SANDBOX"
)

// Labels and annotations gpuplane writes or reads on host objects.
const (
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	ManagedByValue      = "gpuplane"
	LabelVirtualCluster = "gpuplane.io/virtual-cluster"
	LabelTeam           = "gpuplane.io/team"
	LabelDepartment     = "gpuplane.io/department"
	LabelTier           = "gpuplane.io/tier"
	LabelQueueLevel     = "gpuplane.io/queue-level"
	AnnotationGen       = "gpuplane.io/generation"

	// DefaultPoolLabel names the node pool a node belongs to; nodes without
	// it are in DefaultPool, the pool of SHARED teams. A DEDICATED team's
	// pool is fenced by the taint <label>=<pool>:NoSchedule and its
	// virtual clusters are pinned to it (node selector + toleration).
	DefaultPoolLabel = "gpuplane.io/pool"
	DefaultPool      = names.SharedPool

	// KAI Scheduler contract (see docs: vcluster-kai-facts).
	KAISchedulerName = "kai-scheduler"
	KAIQueueLabel    = "kai.scheduler/queue"
	// KAI reads a workload's priority class from this pod label before
	// spec.priorityClassName, and its preemptibility from the other.
	KAIPriorityLabel       = "priorityClassName"
	KAIPreemptibilityLabel = "kai.scheduler/preemptibility"
	// KAIGPUGroupLabel is set by KAI's binder on pods sharing a GPU; the
	// scheduler and binder read it back to place the pod's GPU share.
	KAIGPUGroupLabel    = "runai-gpu-group"
	KAIFractionAnnot    = "gpu-fraction"
	KAIGPUMemoryAnnot   = "gpu-memory"
	NvidiaGPUResource   = "nvidia.com/gpu"
	vclusterMarkerLabel = "vcluster.loft.sh/managed-by"
)

// Queue levels, stored in LabelQueueLevel.
const (
	LevelDepartment = "department"
	LevelTeam       = "team"
	LevelLeaf       = "leaf"
)

// maxVirtualClusterName keeps "vc-" + name within a 63-character label.
const maxVirtualClusterName = validation.DNS1123LabelMaxLength - len("vc-")

// Validate checks what the host cluster needs of a VirtualCluster; other
// rules (quota fits the hierarchy, ...) belong to the domain packages.
func (vc VirtualCluster) Validate() error {
	var problems []string
	check := func(field, v string, maxLen int) {
		if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s %q: %s", field, v, strings.Join(errs, "; ")))
		} else if len(v) > maxLen {
			problems = append(problems, fmt.Sprintf("%s %q: must be at most %d characters", field, v, maxLen))
		}
	}
	check("name", vc.Name, maxVirtualClusterName)
	check("team", vc.Team, validation.DNS1123LabelMaxLength)
	check("department", vc.Department, validation.DNS1123LabelMaxLength)
	switch vc.Tier {
	case TierShared:
		if vc.Pool != "" && vc.Pool != DefaultPool {
			problems = append(problems, fmt.Sprintf("pool %q: SHARED virtual clusters run in pool %q", vc.Pool, DefaultPool))
		}
	case TierDedicated, TierSandbox:
		if why := names.CheckPool(vc.Pool); why != "" {
			problems = append(problems, fmt.Sprintf("pool %q: %s", vc.Pool, why))
		}
	default:
		problems = append(problems, fmt.Sprintf("tier %q: must be %s, %s or %s", vc.Tier, TierShared, TierDedicated, TierSandbox))
	}
	for _, q := range []struct {
		name string
		spec QueueSpec
	}{{"leaf", vc.Leaf}, {"team", vc.TeamQueue}, {"department", vc.DepartmentQueue}} {
		if q.spec.OverQuotaWeight < 0 {
			problems = append(problems, fmt.Sprintf("%s queue: overQuotaWeight must not be negative", q.name))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("hostcluster: invalid virtual cluster: %s", strings.Join(problems, ", "))
	}
	return nil
}

// pool is the node pool the virtual cluster's pods run on.
func (vc VirtualCluster) pool() string {
	if vc.Pool == "" {
		return DefaultPool
	}
	return vc.Pool
}

// chartDropsGPUGroup: the virtual cluster asked for fractional GPUs, but
// the syncer of its vCluster chart rebuilds the labels of host pods on
// every update and drops runai-gpu-group, the GPU-sharing group KAI's
// binder sets on the host pod (chart 0.20; docs/vcluster-verification.md).
// New virtual clusters cannot ask for that (the API refuses it); ones
// created before chart 0.36.1 was offered get shared GPUs refused by their
// guardrails until they are upgraded (FractionalGPUsNotice).
func (vc VirtualCluster) chartDropsGPUGroup() bool {
	r, ok := vclusterversions.Known(vc.ChartVersion)
	return vc.AllowFractionalGPUs && ok && !r.HostLabelsSurvive
}

// fractionalGPUs reports whether the guardrails let vc's pods share GPUs.
func (vc VirtualCluster) fractionalGPUs(p TierProfile) bool {
	return p.FractionalGPUs && vc.AllowFractionalGPUs && !vc.chartDropsGPUGroup()
}

// FractionalGPUsNotice tells the owner of a virtual cluster that asked for
// fractional GPUs on a chart that cannot keep them working why they are
// refused and how to get them; "" when there is nothing to tell.
func (vc VirtualCluster) FractionalGPUsNotice() string {
	if !vc.chartDropsGPUGroup() {
		return ""
	}
	to := vclusterversions.NewestKeepingHostLabels()
	return fmt.Sprintf("shared GPUs (%s, %s) are refused on the host: the syncer of vCluster chart %s drops %s, the GPU-sharing group "+
		"KAI's binder puts on host pods, whenever it updates a pod; upgrade to chart %s "+
		"(a CHANGE_VIRTUAL_CLUSTER_VERSION request: gpuplanectl request upgrade %s --chart-version %s)",
		KAIFractionAnnot, KAIGPUMemoryAnnot, vclusterversions.Normalize(vc.ChartVersion), KAIGPUGroupLabel, to, vc.Name, to)
}

// SyncerServiceAccount is the ServiceAccount the vCluster syncer of a
// virtual cluster runs as, in its host namespace: the chart names it
// vc-<release> (chart 0.20 and 0.36, templates/serviceaccount.yaml) unless
// controlPlane.advanced.serviceAccount.name is set, which gpuplane never
// does. Every tenant pod reaches the host through it.
func SyncerServiceAccount(vcName string) (namespace, name string) {
	return NamespaceName(vcName), "vc-" + ReleaseName(vcName)
}

// SyncerUsername is the syncer's user name in admission requests.
func SyncerUsername(vcName string) string {
	ns, name := SyncerServiceAccount(vcName)
	return "system:serviceaccount:" + ns + ":" + name
}

// NamespaceName is the host namespace of a virtual cluster.
func NamespaceName(vcName string) string { return "vc-" + vcName }

// ReleaseName is the Helm release (and vCluster) name.
func ReleaseName(vcName string) string { return vcName }

// KubeconfigSecretName is the Secret vCluster writes its admin kubeconfig to.
func KubeconfigSecretName(vcName string) string { return "vc-" + ReleaseName(vcName) }

// LeafQueueName is the only queue pods of the virtual cluster may use.
func LeafQueueName(vcName string) string { return boundedName("vc", vcName) }

// TeamQueueName is the parent of all leaf queues of a team.
func TeamQueueName(department, team string) string { return boundedName("team", department, team) }

// DepartmentQueueName is the root queue of a department.
func DepartmentQueueName(department string) string { return boundedName("dept", department) }

// PolicyName names the cluster-scoped admission policies and bindings the
// previous design created for each virtual cluster; Apply removes them once
// the shared guardrails (GuardrailsPolicyName) are in force in its
// namespace, and Delete with the virtual cluster.
func PolicyName(vcName string) string { return "gpuplane-vc-" + vcName }

// NetworkPolicyName is the tenant isolation policy in the host namespace.
const NetworkPolicyName = "gpuplane-isolation"

// boundedName joins parts with "-" and, when the result is longer than a
// DNS-1123 label allows, truncates it and appends a hash of the full name so
// distinct inputs keep distinct names.
func boundedName(parts ...string) string {
	name := strings.Join(parts, "-")
	if len(name) <= validation.DNS1123LabelMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:8]
	head := strings.TrimRight(name[:validation.DNS1123LabelMaxLength-len(suffix)-1], "-")
	return head + "-" + suffix
}

func commonLabels(vc VirtualCluster) map[string]string {
	return map[string]string{
		LabelManagedBy:      ManagedByValue,
		LabelVirtualCluster: vc.Name,
		LabelTeam:           vc.Team,
		LabelDepartment:     vc.Department,
	}
}

func generationAnnotations(vc VirtualCluster) map[string]string {
	return map[string]string{AnnotationGen: fmt.Sprint(vc.Generation)}
}
