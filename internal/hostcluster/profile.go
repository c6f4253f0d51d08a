package hostcluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod Security Standards a tier may enforce on its host namespaces.
// "privileged" is not offered: every tenant pod reaches the host through the
// vCluster syncer, so without a standard a tenant could run privileged pods
// on shared nodes.
const (
	PodSecurityBaseline   = "baseline"
	PodSecurityRestricted = "restricted"
)

// KAI Scheduler's priority classes (created by KAI's installation) and the
// values of its preemptibility label. Classes below 100 are preemptible;
// build and inference are non-preemptible and only ever run within quota.
const (
	PriorityTrain            = "train"             // 50, KAI's default
	PriorityBuildPreemptible = "build-preemptible" // 75
	PriorityBuild            = "build"             // 100
	PriorityInference        = "inference"         // 125

	Preemptible    = "preemptible"
	NonPreemptible = "non-preemptible"
)

// TierProfile is what the admission guardrails allow the pods of one
// isolation tier on the host. Every tier gets the same rules; the profile
// fills in their parameters, so a new tier (issue 14's SANDBOX) is one more
// profile, not new rules.
//
// A virtual cluster's own node pool (VirtualCluster.Pool) is always
// allowed; everything not listed here is refused.
type TierProfile struct {
	// PodSecurity is the Pod Security Standard enforced on the tier's host
	// namespaces: PodSecurityBaseline (default) or PodSecurityRestricted.
	PodSecurity string
	// PriorityClasses pods may name, in spec.priorityClassName or in the
	// priorityClassName label KAI reads first. A pod naming none gets
	// KAI's default (train) and is always admitted.
	PriorityClasses []string
	// Preemptibility lists the values pods may give the
	// kai.scheduler/preemptibility label, which overrides what the priority
	// class implies.
	Preemptibility []string
	// FractionalGPUs: virtual clusters of this tier may use shared GPUs
	// (gpu-fraction/gpu-memory annotations) when they ask for it.
	FractionalGPUs bool
	// FractionalGPUsRefusal explains to a tenant why shared GPUs are refused
	// in this tier (when FractionalGPUs is false).
	FractionalGPUsRefusal string
	// PresetNodeNames may appear in a new pod's spec.nodeName. Empty (the
	// default) refuses every preset node: a pod with a node name never meets
	// a scheduler, so neither its queue's quota nor the pool rules apply. A
	// tier with fenced nodes of its own may list them.
	PresetNodeNames []string
	// ExtraPools are node pools the tier may use besides the virtual
	// cluster's own (tolerate their taint, select them).
	ExtraPools []string
	// ForbiddenTolerationKeys are taint keys no pod of the tier may
	// tolerate (nodes reserved for the platform).
	ForbiddenTolerationKeys []string
	// OwnScheduler: the virtual cluster runs a scheduler of its own
	// (controlPlane.distro.k8s.scheduler) over the nodes of its own pool,
	// synced from the host by selector. The pods it binds arrive on the
	// host with spec.nodeName preset: that is allowed for the nodes of the
	// pool only (read from the host at every apply), and such pods need
	// not go through KAI. Only a tier with a pool of its own may set it.
	OwnScheduler bool
}

// systemPriorityClassPrefix starts the priority classes Kubernetes reserves
// for itself (system-node-critical, system-cluster-critical). vCluster
// 0.36 syncs them for every pod whatever sync.fromHost.priorityClasses
// selects (docs/vcluster-verification.md), so only the host guardrail stops
// a tenant using them: a profile may never list them.
const systemPriorityClassPrefix = "system-"

// ControlPlaneTaintKey fences control-plane nodes.
const ControlPlaneTaintKey = "node-role.kubernetes.io/control-plane"

// DefaultTierProfiles are the profiles used for tiers the settings do not
// configure:
//
//   - SHARED: Pod Security baseline; the preemptible KAI classes only (train,
//     build-preemptible) and preemptibility "preemptible": non-preemptible
//     workloads cannot be reclaimed, and in a pool shared by many teams fair
//     share depends on reclaiming what a team borrowed; shared GPUs allowed.
//   - DEDICATED: Pod Security baseline; all four KAI classes and both
//     preemptibility values (the nodes are the team's own); no shared GPUs,
//     because KAI does not isolate GPU memory between pods sharing a GPU.
//   - SANDBOX: like DEDICATED (a fenced node slice of the team's own, no
//     shared GPUs), and the virtual cluster runs its own scheduler: its
//     pods may preset a node name, but only of a node in its slice.
//
// All refuse tolerating the control-plane taint; SHARED and DEDICATED
// refuse every preset node name.
func DefaultTierProfiles() map[string]TierProfile {
	return map[string]TierProfile{
		TierShared: {
			PodSecurity:             PodSecurityBaseline,
			PriorityClasses:         []string{PriorityTrain, PriorityBuildPreemptible},
			Preemptibility:          []string{Preemptible},
			FractionalGPUs:          true,
			ForbiddenTolerationKeys: []string{ControlPlaneTaintKey},
		},
		TierDedicated: {
			PodSecurity:             PodSecurityBaseline,
			PriorityClasses:         []string{PriorityTrain, PriorityBuildPreemptible, PriorityBuild, PriorityInference},
			Preemptibility:          []string{Preemptible, NonPreemptible},
			FractionalGPUsRefusal:   "KAI does not isolate GPU memory between pods sharing a GPU",
			ForbiddenTolerationKeys: []string{ControlPlaneTaintKey},
		},
		TierSandbox: {
			PodSecurity:             PodSecurityBaseline,
			PriorityClasses:         []string{PriorityTrain, PriorityBuildPreemptible, PriorityBuild, PriorityInference},
			Preemptibility:          []string{Preemptible, NonPreemptible},
			FractionalGPUsRefusal:   "KAI does not isolate GPU memory between pods sharing a GPU",
			ForbiddenTolerationKeys: []string{ControlPlaneTaintKey},
			OwnScheduler:            true,
		},
	}
}

// Validate checks a profile before any namespace or policy is rendered from it.
func (p TierProfile) Validate(tier string) error {
	var problems []string
	switch p.PodSecurity {
	case PodSecurityBaseline, PodSecurityRestricted:
	default:
		problems = append(problems, fmt.Sprintf("pod security %q: must be %s or %s", p.PodSecurity, PodSecurityBaseline, PodSecurityRestricted))
	}
	for _, c := range p.PriorityClasses {
		if errs := validation.IsDNS1123Subdomain(c); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("priority class %q: %s", c, strings.Join(errs, "; ")))
		} else if strings.HasPrefix(c, systemPriorityClassPrefix) {
			problems = append(problems, fmt.Sprintf("priority class %q: %s* classes are the cluster's own (system-node-critical and "+
				"system-cluster-critical preempt anything and pass vCluster's priority class selector); no tenant may use them",
				c, systemPriorityClassPrefix))
		}
	}
	for _, v := range p.Preemptibility {
		if v != Preemptible && v != NonPreemptible {
			problems = append(problems, fmt.Sprintf("preemptibility %q: must be %s or %s", v, Preemptible, NonPreemptible))
		}
	}
	for _, n := range p.PresetNodeNames {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("preset node name %q: %s", n, strings.Join(errs, "; ")))
		}
	}
	for _, pool := range p.ExtraPools {
		if errs := validation.IsValidLabelValue(pool); len(errs) > 0 || pool == "" {
			problems = append(problems, fmt.Sprintf("extra pool %q: must be a non-empty label value", pool))
		}
	}
	if p.OwnScheduler && tier == TierShared {
		problems = append(problems, "own scheduler: only a tier with a node pool of its own may run its own scheduler (its pods would bypass KAI on shared nodes)")
	}
	for _, k := range p.ForbiddenTolerationKeys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("forbidden toleration key %q: %s", k, strings.Join(errs, "; ")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("hostcluster: tier %s profile: %s", tier, strings.Join(problems, ", "))
	}
	return nil
}

// Profile returns the profile of tier (defaults filled in).
func (s Settings) Profile(tier string) TierProfile {
	if p, ok := s.TierProfiles[tier]; ok {
		return p.withDefaults()
	}
	return DefaultTierProfiles()[tier].withDefaults()
}

func (p TierProfile) withDefaults() TierProfile {
	if p.PodSecurity == "" {
		p.PodSecurity = PodSecurityBaseline
	}
	if !p.FractionalGPUs && p.FractionalGPUsRefusal == "" {
		p.FractionalGPUsRefusal = "the tier does not allow shared GPUs"
	}
	return p
}

// ValidateProfiles checks every configured profile.
func (s Settings) ValidateProfiles() error {
	for _, tier := range slices.Sorted(maps.Keys(s.TierProfiles)) {
		if err := s.Profile(tier).Validate(tier); err != nil {
			return err
		}
	}
	return nil
}

// allowedPools are the node pools a virtual cluster's pods may select or
// tolerate: its own and the profile's extra ones.
func allowedPools(vc VirtualCluster, p TierProfile) []string {
	pools := []string{vc.pool()}
	for _, extra := range p.ExtraPools {
		if !slices.Contains(pools, extra) {
			pools = append(pools, extra)
		}
	}
	return pools
}
