package policy

import "github.com/gpuplane/gpuplane/internal/quota"

// Request kinds as policies see them in request.kind.
const (
	KindCreateVirtualCluster      = "CREATE_VIRTUAL_CLUSTER"
	KindChangeVirtualClusterQuota = "CHANGE_VIRTUAL_CLUSTER_QUOTA"
	KindChangeTeamQuota           = "CHANGE_TEAM_QUOTA"
	KindDeleteVirtualCluster      = "DELETE_VIRTUAL_CLUSTER"
	// KindChangeVirtualClusterVersion moves a virtual cluster to a newer
	// vCluster chart or Kubernetes version; no quantities change.
	KindChangeVirtualClusterVersion = "CHANGE_VIRTUAL_CLUSTER_VERSION"
	KindSleepVirtualCluster         = "SLEEP_VIRTUAL_CLUSTER"
	KindWakeVirtualCluster          = "WAKE_VIRTUAL_CLUSTER"
)

// Isolation tiers as policies see them in team.isolation_tier.
const (
	TierShared    = "SHARED"
	TierDedicated = "DEDICATED"
	TierSandbox   = "SANDBOX"
)

// knownKinds and knownTiers let Compile refuse a comparison with a string
// that can never match, e.g. request.kind == "CREATE_VCLUSTER": the type
// checker cannot see that typo and the policy would silently never approve.
var (
	knownKinds = []string{KindCreateVirtualCluster, KindChangeVirtualClusterQuota, KindChangeTeamQuota, KindDeleteVirtualCluster,
		KindChangeVirtualClusterVersion, KindSleepVirtualCluster, KindWakeVirtualCluster}
	knownTiers = []string{TierShared, TierDedicated, TierSandbox}
)

// Input is everything a policy can see. The cel tags are the names policy
// authors write; the Go structs double as the CEL type declarations, so a
// misspelt field fails at Compile, not at evaluation.
//
// Quantities are float64 in human units (GPUs, cores, GiB) because that is
// how people write thresholds; build them with SetQuantities so they come
// from exact integers.
type Input struct {
	Request    Request
	Team       Team
	Department Department
}

// Request is the approval request under evaluation.
type Request struct {
	Kind string `cel:"kind"`
	// Deltas are requested minus current: positive for growth, negative
	// for shrinking and deletion, equal to the totals for creation.
	GPUDelta       float64 `cel:"gpu_delta"`
	CPUDelta       float64 `cel:"cpu_delta"`
	MemoryDeltaGiB float64 `cel:"memory_delta_gib"`
	// Totals are the quota the request asks for (zero for deletion).
	GPU       float64 `cel:"gpu"`
	CPU       float64 `cel:"cpu"`
	MemoryGiB float64 `cel:"memory_gib"`

	Justification string `cel:"justification"`
	Requester     string `cel:"requester"`
	// FractionalGPUs: the request involves sharing GPUs (a fractional GPU
	// quota, or GPU sharing switched on for the virtual cluster).
	FractionalGPUs bool `cel:"fractional_gpus"`
	// Expires: the request sets an expiry on what it grants.
	Expires bool `cel:"expires"`
}

// Team is the team the request is for.
type Team struct {
	Name          string  `cel:"name"`
	IsolationTier string  `cel:"isolation_tier"`
	GPUQuota      float64 `cel:"gpu_quota"`
}

// Department is the team's department.
type Department struct {
	Name      string  `cel:"name"`
	GPUBudget float64 `cel:"gpu_budget"`
}

const bytesPerGiB = 1 << 30

// SetQuantities fills the totals and deltas from exact quotas: requested is
// what the request asks for (zero when deleting), current what exists now
// (zero when creating). Deltas are subtracted as integers and converted
// once, so a 0.1 GPU step is exactly the double a policy's 0.1 literal is,
// and `request.gpu_delta <= 0.1` holds for it. A fractional requested GPU
// amount sets FractionalGPUs; it never clears it.
func (r *Request) SetQuantities(requested, current quota.Resources) {
	delta := requested.Sub(current)
	r.GPU = requested.GPU.KAI()
	r.CPU = cores(requested.CPUMillis)
	r.MemoryGiB = gib(requested.MemoryBytes)
	r.GPUDelta = delta.GPU.KAI()
	r.CPUDelta = cores(delta.CPUMillis)
	r.MemoryDeltaGiB = gib(delta.MemoryBytes)
	if !requested.GPU.IsWhole() {
		r.FractionalGPUs = true
	}
}

func cores(millis int64) float64 { return float64(millis) / 1000 }
func gib(bytes int64) float64    { return float64(bytes) / bytesPerGiB }
