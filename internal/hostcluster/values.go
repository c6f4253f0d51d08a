package hostcluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// Room in the host ResourceQuota for what runs in the namespace besides the
// tenant's workloads: the vCluster control plane (requests 200m / 256Mi in
// chart 0.20) and the synced CoreDNS pod, with headroom for upgrades, which
// briefly run a second control plane pod.
const (
	controlPlaneCPUMillis   = 1000
	controlPlaneMemoryBytes = 2 << 30
)

// RenderVClusterValues renders the vCluster chart values (vcluster.yaml
// format) for the chart version the virtual cluster runs. Existing virtual
// clusters keep their chart version until a change request moves them, so
// every offered version (vclusterversions) renders its own schema.
//
//   - experimental.syncSettings.setOwner is written as false explicitly:
//     otherwise synced pods are owned by the vCluster Service, which KAI's
//     pod-grouper cannot read, and the pods are never scheduled.
//   - The control plane image is pinned to the OSS build of the chart's own
//     version (ghcr.io/loft-sh/vcluster-oss:<chart>): the chart defaults to
//     the Pro image, and the copy inside the Go module carries a placeholder
//     chart version (0.0.1) it would otherwise derive the tag from.
//   - The k8s distro is enabled explicitly (the only one from 0.25; in 0.20
//     also the default, but the OIDC extraArgs only apply to it). Its version
//     is one image tag from 0.25 (controlPlane.distro.k8s.image.tag); chart
//     0.20 has one tag per component (apiServer, controllerManager,
//     scheduler), which set explicitly override the distro.k8s.version
//     shortcut.
//   - On chart 0.20 vCluster rewrites every pod label key on the host
//     unless it is listed in experimental.syncSettings.syncLabels, so
//     kai.scheduler/queue is listed; from 0.21 labels pass through and the
//     key no longer exists in the schema. Either way the host admission
//     policies decide which queue a pod may use.
//   - From 0.21 (the schema gpuplane renders for 0.36) host priority classes
//     labelled TenantPriorityClassLabel are synced into the virtual cluster
//     (sync.fromHost.priorityClasses with a selector), so tenant pods keep
//     KAI's priority class names (train, build-preemptible, build,
//     inference) on the host; without it the syncer blanks
//     priorityClassName. Chart 0.20 has no such option.
//   - DEDICATED pins pods to the team's own node pool (node selector +
//     toleration of its taint) and syncs only those nodes into the virtual
//     cluster.
//   - policies.resourceQuota caps the namespace's requests at the leaf
//     queue's limit plus room for the control plane; without a limit there
//     is no CPU/memory/GPU ceiling, because KAI lets the queue borrow idle
//     capacity above its quota. Limits are not capped and the LimitRange
//     sets default requests only, so pods need no limits and a large request
//     never collides with a small default limit. Object counts keep the
//     chart's defaults, except the node ports and load balancers the
//     control plane's own Service needs (Settings.Exposure).
//   - The control plane is exposed as Settings.Exposure says (exposureValues).
//   - A tier enforcing Pod Security "restricted" gets non-root security
//     contexts for every container the chart runs on the host, where the
//     chart has them (restrictedValues); elsewhere the release step reports
//     the control plane's violation (checkControlPlaneAdmitted).
//   - With Settings.OIDC the virtual API server gets the --oidc-* flags (see
//     addOIDCValues). The team's RBAC inside the virtual cluster is not part
//     of the values: the chart hashes all values into the control plane's
//     pod template, so a member change would restart it. The worker applies
//     it through the admin kubeconfig instead (tenantaccess.go).
func RenderVClusterValues(vc VirtualCluster, s Settings) map[string]any {
	s = s.withDefaults()
	server := s.kubeconfigServer(vc.Name)
	chartVersion := vclusterversions.Normalize(vc.ChartVersion)

	syncSettings := map[string]any{"setOwner": false}
	if chartBefore(chartVersion, 21) {
		syncSettings["syncLabels"] = []any{KAIQueueLabel}
	}

	image := map[string]any{"registry": s.ControlPlaneImageRegistry, "repository": s.ControlPlaneImageRepository}
	if chartVersion != "" {
		image["tag"] = chartVersion
	}
	statefulSet := map[string]any{"image": image}
	if vc.Sleep {
		// Asleep: the control plane is scaled to zero by the chart itself,
		// so every upgrade and drift repair keeps it there; its data
		// (the StatefulSet's volume) stays for the wake.
		statefulSet["highAvailability"] = map[string]any{"replicas": 0}
	}
	k8s := map[string]any{"enabled": true}
	if v := vc.KubernetesVersion; v != "" {
		if !strings.HasPrefix(v, "v") {
			v = "v" + v
		}
		if chartBefore(chartVersion, 25) {
			for _, c := range []string{"apiServer", "controllerManager", "scheduler"} {
				k8s[c] = map[string]any{"image": map[string]any{"tag": v}}
			}
		} else {
			k8s["image"] = map[string]any{"tag": v}
		}
	}
	controlPlane := map[string]any{
		"distro":      map[string]any{"k8s": k8s},
		"statefulSet": statefulSet,
	}
	if s.Profile(vc.Tier).OwnScheduler {
		// A scheduler inside the virtual cluster, over the nodes of its
		// slice (synced from the host below). Charts before 0.25 enable it
		// with controlPlane.advanced.virtualScheduler (deprecated since).
		if chartBefore(chartVersion, 25) {
			controlPlane["advanced"] = map[string]any{"virtualScheduler": map[string]any{"enabled": true}}
		} else {
			k8s["scheduler"] = map[string]any{"enabled": true}
		}
	}
	experimental := map[string]any{"syncSettings": syncSettings}
	var hostManifests []any
	if s.OIDC.Enabled() {
		hostManifests = append(hostManifests, addOIDCValues(vc, s, k8s, statefulSet)...)
	}
	quota := resourceQuotaValues(vc.Leaf)
	hostManifests = append(hostManifests, exposureValues(vc, s, controlPlane, quota)...)
	if sans := extraSANs(server, s.exposureHost(vc.Name)); len(sans) > 0 {
		controlPlane["proxy"] = map[string]any{"extraSANs": sans}
	}
	if len(hostManifests) > 0 {
		experimental["deploy"] = map[string]any{"host": map[string]any{"manifests": mustManifestsYAML(hostManifests...)}}
	}
	var coredns map[string]any
	if s.Profile(vc.Tier).PodSecurity == PodSecurityRestricted {
		if r, ok := vclusterversions.Known(chartVersion); ok && r.RestrictedPodSecurity {
			coredns = restrictedValues(statefulSet, k8s)
		}
	}

	if coredns != nil {
		controlPlane["coredns"] = coredns
	}
	values := map[string]any{
		"controlPlane": controlPlane,
		"experimental": experimental,
		"policies": map[string]any{
			"resourceQuota": map[string]any{"enabled": true, "quota": quota},
			"limitRange": map[string]any{
				"enabled": true,
				// Default requests stay (the quota counts requests, so every pod
				// needs them); default limits go, so that a pod requesting more
				// than a default limit is not rejected for it.
				"default": map[string]any{"cpu": nil, "memory": nil, "ephemeral-storage": nil},
			},
		},
		"exportKubeConfig": map[string]any{"server": server},
	}
	if vc.Tier == TierDedicated || vc.Tier == TierSandbox {
		// The team's own pool: the syncer adds the pool's node selector to
		// every pod that has no node name (the guardrails refuse preset node
		// names, and require the selector on the syncer's pods) and the
		// toleration of the pool's taint; only the pool's nodes are synced
		// into the virtual cluster.
		values["sync"] = map[string]any{
			"toHost": map[string]any{"pods": map[string]any{
				"enforceTolerations": []any{poolToleration(s.PoolLabel, vc.Pool)},
			}},
			"fromHost": map[string]any{"nodes": map[string]any{
				"enabled":          true,
				"clearImageStatus": true,
				"selector":         map[string]any{"labels": map[string]any{s.PoolLabel: vc.Pool}},
			}},
		}
	}
	if !chartBefore(chartVersion, 21) {
		setNested(values, map[string]any{
			"enabled":  true,
			"selector": map[string]any{"matchLabels": map[string]any{TenantPriorityClassLabel: "true"}},
		}, "sync", "fromHost", "priorityClasses")
	}
	return values
}

// ControlPlaneUID is the user and group the vCluster control plane runs as
// in a tier enforcing Pod Security "restricted"; vCluster's own rootless
// e2e suite (e2e/vcluster-rootless.yaml in the 0.36.1 module) runs it as
// the same. The synced CoreDNS pod runs as the syncer's user.
const ControlPlaneUID = 12345

// restrictedValues makes the chart's pods meet Pod Security "restricted":
// the control plane pod (controlPlane.statefulSet.security: pod and syncer
// container; controlPlane.distro.k8s.securityContext: the init container
// that copies the Kubernetes binaries) runs as ControlPlaneUID with no
// privilege escalation, every capability dropped and the RuntimeDefault
// seccomp profile, its data volume group-owned (fsGroup). It returns the
// controlPlane.coredns values: the CoreDNS pod the syncer deploys is
// non-root with only NET_BIND_SERVICE by the chart's own template, which
// sets a seccomp profile only when given a pod security context.
func restrictedValues(statefulSet, k8s map[string]any) (coredns map[string]any) {
	seccomp := map[string]any{"type": "RuntimeDefault"}
	container := func() map[string]any {
		return map[string]any{
			"allowPrivilegeEscalation": false,
			"runAsNonRoot":             true,
			"runAsUser":                ControlPlaneUID,
			"runAsGroup":               ControlPlaneUID,
			"capabilities":             map[string]any{"drop": []any{"ALL"}},
			"seccompProfile":           seccomp,
		}
	}
	statefulSet["security"] = map[string]any{
		"podSecurityContext": map[string]any{
			"runAsNonRoot": true, "runAsUser": ControlPlaneUID, "runAsGroup": ControlPlaneUID,
			"fsGroup": ControlPlaneUID, "seccompProfile": seccomp,
		},
		"containerSecurityContext": container(),
	}
	k8s["securityContext"] = container()
	return map[string]any{"security": map[string]any{"podSecurityContext": map[string]any{"seccompProfile": seccomp}}}
}

// setNested sets values[path...] = v, creating the maps on the way and
// keeping what is already there.
func setNested(values map[string]any, v any, path ...string) {
	m := values
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// extraSANs are the hosts the control plane certificate must be valid for
// besides its Service names (which vCluster adds itself, with a
// LoadBalancer's observed address).
func extraSANs(hosts ...string) []any {
	var out []any
	for _, h := range hosts {
		if h = serverHost(h); h != "" && !slices.Contains(out, any(h)) {
			out = append(out, h)
		}
	}
	return out
}

// addOIDCValues makes the virtual API server accept the platform's ID
// tokens and returns the host manifests that needs:
//
//   - controlPlane.distro.k8s.apiServer.extraArgs: the --oidc-* flags
//     (OIDCSettings.APIServerArgs). The virtual kube-apiserver runs inside
//     the control plane's syncer container; the vCluster proxy in front of
//     it authenticates bearer tokens with a TokenReview against it, so OIDC
//     tokens work through the exported endpoint too.
//   - With a CA bundle: a ConfigMap in the host namespace, created by the
//     release itself (experimental.deploy.host.manifests), mounted through
//     controlPlane.statefulSet.persistence.addVolumes/addVolumeMounts at
//     OIDCCAFile. The chart hashes the values into the pod template, so a
//     new CA restarts the control plane (a platform-wide change, not a
//     tenant's).
func addOIDCValues(vc VirtualCluster, s Settings, k8s, statefulSet map[string]any) []any {
	caFile := ""
	if len(s.OIDC.CACertPEM) > 0 {
		caFile = OIDCCAFile
	}
	apiServer, _ := k8s["apiServer"].(map[string]any)
	if apiServer == nil {
		apiServer = map[string]any{}
		k8s["apiServer"] = apiServer
	}
	args := s.OIDC.APIServerArgs(caFile)
	extra := make([]any, len(args))
	for i, a := range args {
		extra[i] = a
	}
	apiServer["extraArgs"] = extra

	if caFile == "" {
		return nil
	}
	statefulSet["persistence"] = map[string]any{
		"addVolumes": []any{map[string]any{
			"name":      oidcCAVolumeName,
			"configMap": map[string]any{"name": OIDCCAConfigMapName},
		}},
		"addVolumeMounts": []any{map[string]any{
			"name": oidcCAVolumeName, "mountPath": oidcCAMountPath, "readOnly": true,
		}},
	}
	return []any{renderOIDCCAConfigMap(vc, s.OIDC.CACertPEM)}
}

func mustManifestsYAML(objs ...any) string {
	out, err := manifestsYAML(objs...)
	if err != nil {
		panic(err) // typed API objects always marshal
	}
	return out
}

// APIServerArgs are the kube-apiserver flags for these settings, with
// defaults applied; caFile becomes --oidc-ca-file when not empty. Nil when
// OIDC is not enabled.
func (o OIDCSettings) APIServerArgs(caFile string) []string {
	if !o.Enabled() {
		return nil
	}
	o = o.withDefaults()
	usernamePrefix := o.UsernamePrefix
	if usernamePrefix == "" {
		// "-" disables the prefix; an absent flag would mean "<issuer>#"
		// for any claim but email.
		usernamePrefix = "-"
	}
	args := []string{
		"--oidc-issuer-url=" + o.IssuerURL,
		"--oidc-client-id=" + o.ClientID,
		"--oidc-username-claim=" + o.UsernameClaim,
		"--oidc-username-prefix=" + usernamePrefix,
		"--oidc-groups-claim=" + o.GroupsClaim,
	}
	if o.GroupsPrefix != "" {
		args = append(args, "--oidc-groups-prefix="+o.GroupsPrefix)
	}
	if caFile != "" {
		args = append(args, "--oidc-ca-file="+caFile)
	}
	return args
}

func resourceQuotaValues(leaf QueueSpec) map[string]any {
	// nil removes a chart default (Helm drops null keys when merging). Only
	// keys the chart has defaults for may be nil: a null for any other key
	// is rendered as-is and means zero (no GPU pod could ever run). The
	// pod-count default (20) is removed too: the KAI queue is what bounds a
	// tenant's workloads, not the number of pods.
	q := map[string]any{
		"requests.cpu":             nil,
		"requests.memory":          nil,
		"limits.cpu":               nil,
		"limits.memory":            nil,
		"limits.ephemeral-storage": nil,
		"count/pods":               nil,
	}
	if leaf.Limit == nil {
		return q
	}
	if l := leaf.Limit.CPUMillis; l >= 0 {
		q["requests.cpu"] = resource.NewMilliQuantity(l+controlPlaneCPUMillis, resource.DecimalSI).String()
	}
	if l := leaf.Limit.MemoryBytes; l >= 0 {
		q["requests.memory"] = resource.NewQuantity(l+controlPlaneMemoryBytes, resource.BinarySI).String()
	}
	if l := leaf.Limit.GPUCenti; l >= 0 {
		// Only whole GPUs appear in requests; shared GPUs are annotations that
		// KAI accounts for in the queue.
		q["requests."+NvidiaGPUResource] = strconv.FormatInt(l/100, 10)
	}
	return q
}

// chartBefore reports whether a chart version is older than 0.<minor>. An
// empty or unparsable version is treated as 0.20, the oldest gpuplane
// renders.
func chartBefore(version string, minor int) bool {
	major, m, ok := majorMinor(version)
	if !ok {
		return true
	}
	return major == 0 && m < minor
}

func majorMinor(version string) (int, int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(version), "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// ValidateValues checks values against the values.schema.json of the chart
// in chartDir, after merging them over the chart's defaults exactly as Helm
// does at install. The vCluster schema forbids unknown keys everywhere, so a
// misspelt or moved key is caught here rather than silently ignored.
func ValidateValues(chartDir string, values map[string]any) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("hostcluster: load chart %s: %w", chartDir, err)
	}
	return validateChartValues(ch, values)
}

func validateChartValues(ch *chart.Chart, values map[string]any) error {
	if len(ch.Schema) == 0 {
		return nil
	}
	plain, err := jsonRoundTrip(values)
	if err != nil {
		return fmt.Errorf("hostcluster: values are not JSON-serialisable: %w", err)
	}
	merged, err := chartutil.CoalesceValues(ch, plain)
	if err != nil {
		return fmt.Errorf("hostcluster: merge values with chart %s defaults: %w", ch.Name(), err)
	}
	if err := chartutil.ValidateAgainstSchema(ch, merged); err != nil {
		return &ValuesError{Chart: ch.Name(), Version: ch.Metadata.Version, Detail: strings.TrimSpace(err.Error())}
	}
	return nil
}

// ValuesError reports values the chart's schema rejects. Detail names each
// bad path (e.g. "at '/experimental/syncSettings/setOwner': got string, want
// boolean").
type ValuesError struct {
	Chart, Version string
	Detail         string
}

func (e *ValuesError) Error() string {
	detail := strings.TrimPrefix(e.Detail, e.Chart+":")
	return fmt.Sprintf("hostcluster: values rejected by the schema of chart %s %s: %s", e.Chart, e.Version, strings.TrimSpace(detail))
}

// jsonRoundTrip turns typed Go values ([]string, int32, ...) into the
// JSON-shaped maps Helm and the schema validator expect.
func jsonRoundTrip(values map[string]any) (map[string]any, error) {
	data, err := json.Marshal(values)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// TenantPriorityClassLabel marks the host priority classes tenants may use
// (KAI's train, build-preemptible, build and inference): only those are
// synced into virtual clusters (sync.fromHost.priorityClasses.selector),
// so a tenant pod can name them. The host admission policies still decide
// which of them a team may pick.
const TenantPriorityClassLabel = "gpuplane.io/tenant-priority-class"
