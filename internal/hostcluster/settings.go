package hostcluster

import (
	"net/url"
	"strings"
)

// Settings are platform-wide choices that shape every virtual cluster; they
// come from gpuplane's configuration, not from the tenant.
type Settings struct {
	// PoolLabel is the node label naming a node's pool. Default
	// DefaultPoolLabel.
	PoolLabel string
	// DedicatedPool is the pool value dedicated-tier virtual clusters are
	// pinned to; its nodes must carry the label PoolLabel=DedicatedPool and
	// the taint PoolLabel=DedicatedPool:NoSchedule. Default DedicatedPool.
	DedicatedPool string
	// IngressNamespaces may reach tenant pods besides the tenant's own
	// namespace (ingress controller, gpuplane itself, monitoring).
	IngressNamespaces []string
	// KubeconfigServer is the API server URL written into the exported
	// kubeconfig; "{name}" and "{namespace}" are replaced. Default: the
	// in-cluster Service, https://{name}.{namespace}.svc (what gpuplane itself
	// uses; tenants get an OIDC kubeconfig for an ingress later).
	KubeconfigServer string
	// ControlPlaneImageRepository overrides the vCluster syncer image
	// repository. Default "loft-sh/vcluster-oss": the chart defaults to the
	// Pro image, which gpuplane neither needs nor licenses.
	ControlPlaneImageRepository string
	// Chart is where the vCluster chart comes from.
	Chart ChartSource
}

const defaultKubeconfigServer = "https://{name}.{namespace}.svc"

func (s Settings) withDefaults() Settings {
	if s.PoolLabel == "" {
		s.PoolLabel = DefaultPoolLabel
	}
	if s.DedicatedPool == "" {
		s.DedicatedPool = DedicatedPool
	}
	if s.KubeconfigServer == "" {
		s.KubeconfigServer = defaultKubeconfigServer
	}
	if s.ControlPlaneImageRepository == "" {
		s.ControlPlaneImageRepository = "loft-sh/vcluster-oss"
	}
	return s
}

func (s Settings) kubeconfigServer(vcName string) string {
	return strings.NewReplacer("{name}", ReleaseName(vcName), "{namespace}", NamespaceName(vcName)).Replace(s.KubeconfigServer)
}

// serverHost is the host the control plane certificate must be valid for.
func serverHost(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
