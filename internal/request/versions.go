package request

import (
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// RunaiGPUGroupLabel is the label KAI's binder puts on host pods sharing a
// GPU (docs/vcluster-verification.md).
const RunaiGPUGroupLabel = "runai-gpu-group"

// addVersionProblems turns vCluster version problems into violations of
// <prefix>.chart_version / .kubernetes_version.
func addVersionProblems(v *errs.Violations, prefix string, problems []vclusterversions.Problem) {
	for _, p := range problems {
		field := ".chart_version"
		if p.Field == "kubernetes" {
			field = ".kubernetes_version"
		}
		v.Add(prefix+field, "%s", p.Message)
	}
}

// NormalizeSpec fills what a create request leaves out — weight 1,
// priority 100 (KAI's default), the offered default chart and its
// Kubernetes version — and checks the versions against the offered
// catalog: a chart or Kubernetes version the platform does not offer is a
// violation of field.chart_version / field.kubernetes_version naming the
// offered ones, and fractional GPUs are refused on a chart whose syncer
// drops KAI's GPU-sharing label from host pods.
func (s *Service) NormalizeSpec(v *errs.Violations, field string, spec *virtualcluster.Spec) {
	if spec.OverQuotaWeight == 0 {
		spec.OverQuotaWeight = 1
	}
	if spec.Priority == 0 {
		spec.Priority = 100
	}
	choice, problems := s.versions.Resolve(spec.ChartVersion, spec.KubernetesVersion)
	addVersionProblems(v, field, problems)
	if len(problems) > 0 {
		return
	}
	if spec.AllowFractionalGPUs && !choice.Release.HostLabelsSurvive {
		v.Add(field+".allow_fractional_gpus", "not available with vCluster chart %s: its syncer rebuilds the labels of host pods on every update "+
			"and drops %s, the GPU-sharing group KAI's binder sets on the host pod, so pods sharing a GPU would lose track of it; "+
			"use chart %s", choice.Release.Chart, RunaiGPUGroupLabel, s.versions.DefaultChart())
	}
	spec.ChartVersion, spec.KubernetesVersion = choice.Release.Chart, choice.Kubernetes
}

// ResolveUpgrade checks a CHANGE_VIRTUAL_CLUSTER_VERSION request for vc
// (named name) asking for chart and kubernetes (either may be empty) and
// returns the payload with both resolved. Downgrades, versions not
// offered, skipped Kubernetes minors and a request that changes nothing
// are violations of field.chart_version / field.kubernetes_version.
func (s *Service) ResolveUpgrade(v *errs.Violations, field string, vc virtualcluster.VirtualCluster, name, chart, kubernetes string) *ChangeVersionPayload {
	to, problems := s.versions.Upgrade(vc.Spec.ChartVersion, vc.Spec.KubernetesVersion, chart, kubernetes)
	addVersionProblems(v, field, problems)
	if len(problems) == 0 && to.Release.Chart == vclusterversions.Normalize(vc.Spec.ChartVersion) && to.Kubernetes == vc.Spec.KubernetesVersion {
		v.Add(field+".chart_version", "%s already runs vCluster chart %s with Kubernetes %s; name a newer chart_version or kubernetes_version",
			name, to.Release.Chart, to.Kubernetes)
	}
	return &ChangeVersionPayload{VirtualCluster: name, ChartVersion: to.Release.Chart, KubernetesVersion: to.Kubernetes}
}
