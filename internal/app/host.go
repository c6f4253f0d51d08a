package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// hostConfig returns the host cluster's REST config, or nil when none is
// configured (no kubeconfig and not running in a pod).
func hostConfig(cfg Config) (*rest.Config, error) {
	if cfg.Kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("host cluster kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		return rc, nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		return rc, nil
	}
	return nil, nil
}

func newHostClient(rc *rest.Config, cfg Config, log *slog.Logger, tp trace.TracerProvider) (*hostcluster.Client, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 50, 100
	profiles, err := cfg.TierProfiles()
	if err != nil {
		return nil, err
	}
	annotations, err := keyValues("vcluster-exposure-annotations", cfg.ExposureAnnots)
	if err != nil {
		return nil, err
	}
	settings := hostcluster.Settings{
		KubeconfigServer:  cfg.KubeconfigServer,
		TierProfiles:      profiles,
		KAINodePoolLabel:  cfg.KAINodePoolLabel,
		IngressNamespaces: splitList(cfg.TenantIngressNS),
		Exposure: hostcluster.Exposure{Mode: cfg.Exposure, Host: cfg.ExposureHost,
			IngressClassName: cfg.ExposureClass, Annotations: annotations},
	}
	if err := settings.Exposure.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	oidc, err := vclusterOIDC(cfg)
	if err != nil {
		return nil, err
	}
	if oidc.Enabled() && !strings.HasPrefix(oidc.IssuerURL, "https://") {
		// kube-apiserver refuses a non-https issuer and would not start; the
		// dev issuer is plain HTTP (its virtual clusters are simulated).
		log.Warn("virtual clusters get no OIDC authentication: kube-apiserver requires an https issuer", "issuer", oidc.IssuerURL)
		oidc = hostcluster.OIDCSettings{}
	}
	if err := oidc.Validate(); err != nil {
		return nil, err
	}
	settings.OIDC = oidc
	if settings.Chart, err = chartSource(cfg); err != nil {
		return nil, err
	}
	return hostcluster.New(rc, hostcluster.Options{Settings: settings, Logger: log, TracerProvider: tp})
}

// chartSource reads --vcluster-chart-dir (version=dir pairs) and
// --vcluster-chart-repo.
func chartSource(cfg Config) (hostcluster.ChartSource, error) {
	src := hostcluster.ChartSource{RepoURL: cfg.VClusterChartRepo}
	dirs, err := keyValues("vcluster-chart-dir", cfg.VClusterChartDir)
	if err != nil {
		return src, fmt.Errorf("%w (version=dir pairs, e.g. 0.36.1=/charts/vcluster)", err)
	}
	src.Dirs = map[string]string{}
	for v, dir := range dirs {
		src.Dirs[vclusterversions.Normalize(v)] = dir
	}
	return src, nil
}

// vclusterOIDC is the OIDC configuration of the virtual API servers: the
// same issuer, client and claims gpuplane's API verifies, so a tenant's
// token works on both.
func vclusterOIDC(cfg Config) (hostcluster.OIDCSettings, error) {
	if cfg.OIDCIssuerURL == "" {
		return hostcluster.OIDCSettings{}, nil
	}
	o := hostcluster.OIDCSettings{
		IssuerURL:      cfg.OIDCIssuerURL,
		ClientID:       cfg.OIDCClientID,
		UsernameClaim:  cfg.OIDCUsernameClaim,
		UsernamePrefix: cfg.OIDCUsernamePrefix,
		GroupsClaim:    cfg.OIDCGroupsClaim,
		GroupsPrefix:   cfg.OIDCGroupsPrefix,
	}
	if cfg.OIDCCAFile != "" {
		ca, err := os.ReadFile(cfg.OIDCCAFile)
		if err != nil {
			return o, fmt.Errorf("read OIDC CA file: %w", err)
		}
		o.CACertPEM = ca
	}
	return o, nil
}

// nodeCapacity reads host capacity per node pool from the nodes, cached
// briefly because every approval asks for it. The total (the cluster level
// of the fit check) and each pool (the level a team's quota is carved from)
// come from the same read.
type nodeCapacity struct {
	host *hostcluster.Client
	ttl  time.Duration

	mu      sync.Mutex
	at      time.Time
	cached  map[string]quota.Resources
	lastErr error
}

var _ tenancy.PoolCapacitySource = (*nodeCapacity)(nil)

func (n *nodeCapacity) PoolCapacity(ctx context.Context) (map[string]quota.Resources, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if time.Since(n.at) < n.ttl && n.lastErr == nil {
		return n.cached, nil
	}
	pools, err := n.host.Capacity(ctx)
	if err != nil {
		n.lastErr = err
		return nil, err
	}
	out := make(map[string]quota.Resources, len(pools))
	for name, q := range pools {
		out[name] = quota.Resources{GPU: quota.GPU(q.GPUCenti), CPUMillis: q.CPUMillis, MemoryBytes: q.MemoryBytes}
	}
	n.cached, n.at, n.lastErr = out, time.Now(), nil
	return out, nil
}

func (n *nodeCapacity) Capacity(ctx context.Context) (quota.Resources, error) {
	pools, err := n.PoolCapacity(ctx)
	if err != nil {
		return quota.Resources{}, err
	}
	return tenancy.StaticPoolCapacity(pools).Capacity(ctx)
}
