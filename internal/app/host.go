package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
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

// hostOptions are the settings every host cluster's client is built with
// (the tier profiles, exposure, OIDC and chart source are platform-wide).
func hostOptions(cfg Config, log *slog.Logger, tp trace.TracerProvider) (hostcluster.Options, error) {
	profiles, err := cfg.TierProfiles()
	if err != nil {
		return hostcluster.Options{}, err
	}
	annotations, err := keyValues("vcluster-exposure-annotations", cfg.ExposureAnnots)
	if err != nil {
		return hostcluster.Options{}, err
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
		return hostcluster.Options{}, fmt.Errorf("invalid configuration: %w", err)
	}
	oidc, err := vclusterOIDC(cfg)
	if err != nil {
		return hostcluster.Options{}, err
	}
	if oidc.Enabled() && !strings.HasPrefix(oidc.IssuerURL, "https://") {
		// kube-apiserver refuses a non-https issuer and would not start; the
		// dev issuer is plain HTTP (its virtual clusters are simulated).
		log.Warn("virtual clusters get no OIDC authentication: kube-apiserver requires an https issuer", "issuer", oidc.IssuerURL)
		oidc = hostcluster.OIDCSettings{}
	}
	if err := oidc.Validate(); err != nil {
		return hostcluster.Options{}, err
	}
	settings.OIDC = oidc
	if settings.Chart, err = chartSource(cfg); err != nil {
		return hostcluster.Options{}, err
	}
	return hostcluster.Options{Settings: settings, Logger: log, TracerProvider: tp}, nil
}

// Default client-side rate limit of each of the worker's API clients of a
// host cluster (--host-cluster-qps, --host-cluster-burst). Reads come from watch caches
// (hostcluster's cache.go), so a resync of unchanged virtual clusters sends
// almost nothing; what the limit meets are writes: about 20 requests per
// new virtual cluster, most of them Helm's install of the chart. 200/s with
// a burst of 400 lets a hundred approvals at once provision without
// waiting on the limiter (see BenchmarkProvision), while still capping what
// a runaway worker can send; the API server's priority and fairness
// protects it beyond that.
const (
	DefaultHostClusterQPS   = 200
	DefaultHostClusterBurst = 400
)

// checkHostRateLimit refuses a rate limit client-go would silently replace
// by its own defaults (5/s, burst 10): QPS 0, or a burst below 1.
func checkHostRateLimit(cfg Config) error {
	switch {
	case cfg.HostClusterQPS == 0:
		return errors.New("invalid configuration: host-cluster-qps must not be 0 (negative: no client-side limit)")
	case cfg.HostClusterQPS > 0 && cfg.HostClusterBurst < 1:
		return errors.New("invalid configuration: host-cluster-burst must be at least 1")
	}
	return nil
}

// TuneHostConfig sets what every host cluster's REST config gets: the rate
// limit (--host-cluster-qps, --host-cluster-burst) and the longest a single
// request may take, so an API server that hangs fails the reconcile instead
// of holding it. Exported for the benchmarks, which build host clients the
// way a worker process does.
func TuneHostConfig(cfg Config) func(*rest.Config) {
	return func(rc *rest.Config) {
		rc.QPS, rc.Burst = float32(cfg.HostClusterQPS), cfg.HostClusterBurst
		if cfg.HostClusterQPS < 0 {
			rc.QPS, rc.Burst = -1, 0 // client-go: no rate limiter at all
		}
		if cfg.HostClusterTimeout > 0 {
			rc.Timeout = cfg.HostClusterTimeout
		}
	}
}

// hosts are the clients of the host clusters: the one gpuplane runs in,
// and a registry of the others (built from their kubeconfig Secrets).
type hosts struct {
	home     *hostcluster.Client
	registry *hostcluster.Registry
}

func newHosts(rc *rest.Config, cfg Config, log *slog.Logger, tp trace.TracerProvider) (hosts, error) {
	opts, err := hostOptions(cfg, log, tp)
	if err != nil {
		return hosts{}, err
	}
	if err := checkHostRateLimit(cfg); err != nil {
		return hosts{}, err
	}
	rc = rest.CopyConfig(rc)
	TuneHostConfig(cfg)(rc)
	home, err := hostcluster.New(rc, opts)
	if err != nil {
		return hosts{}, err
	}
	registry, err := hostcluster.NewRegistry(rc, cfg.HostClusterSecretNamespace, opts, TuneHostConfig(cfg))
	if err != nil {
		return hosts{}, err
	}
	return hosts{home: home, registry: registry}, nil
}

// close stops the clients' watches (hostcluster.Client.Close).
func (h hosts) close() {
	if h.registry != nil {
		h.registry.Close()
	}
	if h.home != nil {
		h.home.Close()
	}
}

// client is the client of one host cluster.
func (h hosts) client(ctx context.Context, hc fleet.HostCluster) (*hostcluster.Client, error) {
	if hc.Connection.InCluster {
		return h.home, nil
	}
	return h.registry.Client(ctx, hostcluster.Target{ID: hc.ID, SecretName: hc.Connection.Secret, SecretKey: hc.Connection.Key})
}

// fleetKubeconfigs reads a virtual cluster's CA and admin kubeconfig from
// the host cluster it runs on (api.Kubeconfigs).
type fleetKubeconfigs struct {
	db    store.Querier
	hosts hosts
}

func (f fleetKubeconfigs) clientOf(ctx context.Context, vcID string) (*hostcluster.Client, error) {
	vc, err := virtualcluster.Get(ctx, f.db, vcID, false)
	if err != nil {
		return nil, err
	}
	if vc.HostCluster == "" {
		return nil, fmt.Errorf("virtual cluster %s is not placed on a host cluster", vcID)
	}
	hc, err := fleet.Get(ctx, f.db, vc.HostCluster, false)
	if err != nil {
		return nil, err
	}
	return f.hosts.client(ctx, hc)
}

func (f fleetKubeconfigs) VirtualClusterCA(ctx context.Context, vcID string) ([]byte, error) {
	c, err := f.clientOf(ctx, vcID)
	if err != nil {
		return nil, err
	}
	return c.VirtualClusterCA(ctx, vcID)
}

func (f fleetKubeconfigs) AdminKubeconfig(ctx context.Context, vcID string) ([]byte, error) {
	c, err := f.clientOf(ctx, vcID)
	if err != nil {
		return nil, err
	}
	return c.AdminKubeconfig(ctx, vcID)
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
