// Package app holds the one configuration struct and Run, which builds
// every component in order and stops them in reverse.
package app

import (
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// Config is every setting of the server. Each field is a flag and an
// environment variable (GPUPLANE_ + the flag name upper-cased, '-' -> '_');
// flags win over the environment.
type Config struct {
	GRPCAddr string `flag:"grpc-addr" help:"gRPC listen address"`
	// PublicAPIAddress is how users reach the gRPC API (behind a load
	// balancer or ingress); it goes into the kubeconfigs' credential plugin.
	PublicAPIAddress string `flag:"public-api-address" help:"gRPC address users reach (host:port), written into virtual-cluster kubeconfigs; default: the listen address on localhost"`
	HTTPAddr         string `flag:"http-addr" help:"HTTP (REST gateway, health, OpenAPI) listen address; public"`
	// MetricsAddr is private: metrics name every team with its quota.
	MetricsAddr string `flag:"metrics-addr" help:"listen address of /metrics (and /healthz) of serve and worker; keep it off the public network, the metrics name every team (empty: no metrics listener)"`
	// MaxRequestBytes bounds what a REST or gRPC caller may send in one
	// request; REST bodies are read only after the token checked out.
	MaxRequestBytes int `flag:"max-request-bytes" help:"largest request body (REST) or message (gRPC) accepted, in bytes; larger REST bodies get 413"`

	// Browser portals (the Backstage plugin) call the REST API from their own
	// origin; internal/server/cors.go.
	CORSAllowedOrigins   string        `flag:"cors-allowed-origins" help:"comma-separated browser origins that may call the REST API (e.g. https://backstage.example.com), or * for any; empty: none"`
	CORSAllowCredentials bool          `flag:"cors-allow-credentials" help:"answer allowed origins with Access-Control-Allow-Credentials (cookie-based proxies; not needed for bearer tokens; refused with *)"`
	CORSMaxAge           time.Duration `flag:"cors-max-age" help:"how long browsers may cache a CORS preflight answer"`

	DatabaseURL      string `flag:"database-url" env:"DATABASE_URL" secret:"true" help:"PostgreSQL URL (postgres://user:pass@host/db)"`
	DatabaseMaxConns int    `flag:"database-max-conns" help:"PostgreSQL pool size"`

	OIDCIssuerURL     string `flag:"oidc-issuer-url" help:"OIDC issuer URL (exactly as in its discovery document)"`
	OIDCClientID      string `flag:"oidc-client-id" help:"OIDC client id; tokens must carry it in aud"`
	OIDCUsernameClaim string `flag:"oidc-username-claim" help:"token claim used as the user name (matches Member.user)"`
	OIDCGroupsClaim   string `flag:"oidc-groups-claim" help:"token claim holding the user's groups"`
	OIDCCAFile        string `flag:"oidc-ca-file" help:"PEM CA bundle to trust for the issuer (optional)"`
	// OIDCKeyRefetchInterval bounds the issuer load forged tokens can cause.
	OIDCKeyRefetchInterval time.Duration `flag:"oidc-key-refetch-interval" help:"least time between two fetches of the issuer's signing keys caused by tokens naming an unknown key"`

	PlatformAdminGroups string `flag:"platform-admin-groups" help:"comma-separated OIDC groups whose members are platform admins"`

	CapacityGPU    string  `flag:"capacity-gpu" help:"static host capacity: GPUs (used only without a host cluster; with one, the worker reads every host cluster's nodes)"`
	CapacityCPU    string  `flag:"capacity-cpu" help:"static host capacity: CPU (e.g. 256 or 500m)"`
	CapacityMemory string  `flag:"capacity-memory" help:"static host capacity: memory (e.g. 2Ti)"`
	Overcommit     float64 `flag:"overcommit" help:"sum of department budgets may reach host capacity x this ratio"`

	DefaultKubernetesVersion string `flag:"default-kubernetes-version" help:"virtual Kubernetes version of requests that name none and use the default chart (empty: the chart's own default; other charts always use theirs)"`
	DefaultChartVersion      string `flag:"default-chart-version" help:"vCluster chart version of requests that name none; must be among --vcluster-chart-versions"`
	VClusterChartVersions    string `flag:"vcluster-chart-versions" help:"comma-separated vCluster chart versions requests may name (existing virtual clusters keep theirs until a change request moves them)"`

	Kubeconfig           string        `flag:"kubeconfig" env:"KUBECONFIG" help:"host cluster kubeconfig; empty: in-cluster config when running in a pod, else no host cluster"`
	RunWorker            bool          `flag:"run-worker" help:"serve also runs the host-cluster worker (small installs)"`
	WorkerConcurrency    int           `flag:"worker-concurrency" help:"virtual clusters reconciled at once"`
	ResyncInterval       time.Duration `flag:"resync-interval" help:"how often every virtual cluster is re-applied to repair drift"`
	ProvisioningDeadline time.Duration `flag:"provisioning-deadline" help:"a virtual cluster not ready (e.g. its control plane never starting) for this long becomes DEGRADED with the reason; the worker keeps trying"`
	VClusterChartDir     string        `flag:"vcluster-chart-dir" help:"local vCluster charts instead of the repository (air-gapped installs; dev mode and tests fill it from the Go module cache): comma-separated version=dir pairs, e.g. 0.36.1=/charts/vcluster-0.36.1"`
	VClusterChartRepo    string        `flag:"vcluster-chart-repo" help:"vCluster chart repository URL or OCI reference"`
	KubeconfigServer     string        `flag:"vcluster-kubeconfig-server" help:"virtual API server address vCluster writes into its admin kubeconfig, used by the worker from inside the host cluster ({name}, {namespace} are replaced; default https://{name}.{namespace}.svc)"`
	Exposure             string        `flag:"vcluster-exposure" help:"how members reach virtual API servers from outside the host cluster: ClusterIP (not at all), LoadBalancer, NodePort or Ingress (TLS passthrough)"`
	ExposureHost         string        `flag:"vcluster-exposure-host" help:"Ingress: host of each virtual API server, e.g. {name}.vc.example.com; NodePort: an address reaching the nodes; LoadBalancer: optional DNS name of each load balancer ({name}, {namespace} are replaced)"`
	ExposureClass        string        `flag:"vcluster-ingress-class" help:"ingressClassName of the virtual API servers' Ingresses (empty: the cluster default)"`
	ExposureAnnots       string        `flag:"vcluster-exposure-annotations" help:"comma-separated key=value annotations for the control plane Service (LoadBalancer, NodePort) or Ingress (empty for Ingress: ingress-nginx TLS passthrough)"`
	TenantIngressNS      string        `flag:"tenant-ingress-namespaces" help:"comma-separated namespaces whose pods may connect to tenant pods and virtual API servers (ingress controller, monitoring, gpuplane's own for the worker)"`

	// Many host clusters (internal/fleet): the one gpuplane runs in is
	// host cluster "default"; others are reached through kubeconfig
	// Secrets in this namespace.
	HostClusterSecretNamespace string        `flag:"host-cluster-secret-namespace" help:"namespace (on the cluster gpuplane runs in) of the Secrets holding other host clusters' kubeconfigs"`
	HostClusterConcurrency     int           `flag:"host-cluster-concurrency" help:"most virtual clusters of one host cluster a worker reconciles at once (0: all of --worker-concurrency with one host cluster, half with more), so a slow or unreachable host cluster never blocks the others"`
	HostClusterProbeInterval   time.Duration `flag:"host-cluster-probe-interval" help:"how often the worker probes every host cluster (health, Kubernetes and KAI versions, capacity per node pool)"`
	HostClusterTimeout         time.Duration `flag:"host-cluster-timeout" help:"longest a single request to a host cluster's API server may take"`
	// HostClusterQPS and HostClusterBurst are the client-side rate limit of
	// each of the worker's API clients of a host cluster (client-go's token
	// bucket, one per client: typed, dynamic, metadata, Helm's, the watch
	// caches'). The worker reads from watch caches, so the limit is met only
	// by bursts of writes (many approvals at once, the full apply after a
	// restart); the API server's own priority and fairness protects it
	// beyond that.
	HostClusterQPS   float64 `flag:"host-cluster-qps" help:"requests per second each of the worker's API clients of a host cluster may send (client-side rate limit, one per client; negative: none)"`
	HostClusterBurst int     `flag:"host-cluster-burst" help:"requests one of the worker's API clients of a host cluster may send at once above --host-cluster-qps"`

	KAINodePoolLabel string `flag:"kai-node-pool-label" help:"KAI's node-pool label key (its global.nodePoolLabelKey): every gpuplane node pool becomes a KAI node pool, so fair share stays inside each pool; empty: one KAI scheduler for all pools"`

	// Tier profiles: what the admission guardrails allow each isolation
	// tier (see hostcluster.TierProfile).
	SharedPodSecurity        string `flag:"shared-pod-security" help:"Pod Security Standard enforced on SHARED host namespaces: baseline or restricted"`
	DedicatedPodSecurity     string `flag:"dedicated-pod-security" help:"Pod Security Standard enforced on DEDICATED host namespaces: baseline or restricted"`
	SharedPriorityClasses    string `flag:"shared-priority-classes" help:"comma-separated priority classes SHARED pods may use (spec.priorityClassName or KAI's priorityClassName label)"`
	DedicatedPriorityClasses string `flag:"dedicated-priority-classes" help:"comma-separated priority classes DEDICATED pods may use"`
	SharedPreemptibility     string `flag:"shared-preemptibility" help:"comma-separated values SHARED pods may give the kai.scheduler/preemptibility label"`
	DedicatedPreemptibility  string `flag:"dedicated-preemptibility" help:"comma-separated values DEDICATED pods may give the kai.scheduler/preemptibility label"`

	OIDCUsernamePrefix string `flag:"vcluster-oidc-username-prefix" help:"prefix of OIDC user names inside virtual clusters (empty: none)"`
	OIDCGroupsPrefix   string `flag:"vcluster-oidc-groups-prefix" help:"prefix of OIDC group names inside virtual clusters (empty: none; keeps a groups claim such as system:masters powerless)"`

	// The change feed and its consumers (issue 13; internal/app/events.go).
	EventRetention         time.Duration `flag:"event-retention" help:"how long events are kept for watches to resume from (0: forever); older resume positions must re-list"`
	WatchMaxPerUser        int           `flag:"watch-max-per-user" help:"open watches one user may hold on this server"`
	WatchHeartbeat         time.Duration `flag:"watch-heartbeat" help:"how often an idle watch sends a heartbeat (keeps proxies from closing it)"`
	RunWebhooks            bool          `flag:"run-webhooks" help:"this process delivers webhooks (any number of processes may; they share the work through leases)"`
	WebhookHTTPHosts       string        `flag:"webhook-http-hosts" help:"comma-separated hosts webhooks may call over plain http (dev: localhost); others need https"`
	WebhookAllowedCIDRs    string        `flag:"webhook-allowed-cidrs" help:"comma-separated non-public ranges webhooks may call anyway (e.g. 10.20.0.0/16); loopback, link-local, metadata and private ranges are refused otherwise"`
	WebhookDisableAfter    int           `flag:"webhook-disable-after" help:"failed deliveries in a row after which a subscription is disabled (-1: never)"`
	WebhookMaxAttempts     int           `flag:"webhook-max-attempts" help:"attempts of one delivery before it is FAILED"`
	WebhookBackoffBase     time.Duration `flag:"webhook-backoff-base" help:"first retry delay of a failed delivery; doubled per attempt up to --webhook-backoff-max"`
	WebhookBackoffMax      time.Duration `flag:"webhook-backoff-max" help:"longest retry delay of a failed delivery"`
	WebhookTimeout         time.Duration `flag:"webhook-timeout" help:"time limit of one delivery attempt"`
	WebhookDeliveryHistory time.Duration `flag:"webhook-delivery-history" help:"how long finished deliveries stay in the delivery log"`

	ExpiryInterval  time.Duration `flag:"expiry-interval" help:"how often expired virtual clusters get delete requests (0 = never)"`
	ShutdownTimeout time.Duration `flag:"shutdown-timeout" help:"graceful stop deadline"`
	LogFormat       string        `flag:"log-format" help:"text or json"`
	LogLevel        string        `flag:"log-level" help:"debug, info, warn or error"`
}

// Defaults are the embedded defaults.
func Defaults() Config {
	return Config{
		GRPCAddr:                   ":9090",
		HTTPAddr:                   ":8080",
		MaxRequestBytes:            1 << 20,
		CORSMaxAge:                 10 * time.Minute,
		DatabaseMaxConns:           20,
		OIDCClientID:               "gpuplane",
		OIDCUsernameClaim:          "email",
		OIDCGroupsClaim:            "groups",
		OIDCKeyRefetchInterval:     10 * time.Second,
		PlatformAdminGroups:        "platform-admins",
		CapacityGPU:                "0",
		CapacityCPU:                "0",
		CapacityMemory:             "0",
		Overcommit:                 1.0,
		DefaultChartVersion:        "0.36.1",
		VClusterChartVersions:      "0.36.1,0.20.0",
		Exposure:                   "ClusterIP",
		WorkerConcurrency:          4,
		ResyncInterval:             5 * time.Minute,
		ProvisioningDeadline:       reconcile.DefaultProvisioningDeadline,
		MetricsAddr:                ":8081",
		HostClusterSecretNamespace: "gpuplane-system",
		HostClusterProbeInterval:   15 * time.Second,
		HostClusterTimeout:         30 * time.Second,
		HostClusterQPS:             DefaultHostClusterQPS,
		HostClusterBurst:           DefaultHostClusterBurst,
		VClusterChartRepo:          "https://charts.loft.sh",
		SharedPodSecurity:          hostcluster.PodSecurityBaseline,
		DedicatedPodSecurity:       hostcluster.PodSecurityBaseline,
		SharedPriorityClasses:      "train,build-preemptible",
		DedicatedPriorityClasses:   "train,build-preemptible,build,inference",
		SharedPreemptibility:       "preemptible",
		DedicatedPreemptibility:    "preemptible,non-preemptible",
		OIDCUsernamePrefix:         "oidc:",
		OIDCGroupsPrefix:           "oidc:",
		EventRetention:             7 * 24 * time.Hour,
		WatchMaxPerUser:            16,
		WatchHeartbeat:             15 * time.Second,
		RunWebhooks:                true,
		WebhookDisableAfter:        15,
		WebhookMaxAttempts:         12,
		WebhookBackoffBase:         5 * time.Second,
		WebhookBackoffMax:          time.Hour,
		WebhookTimeout:             10 * time.Second,
		WebhookDeliveryHistory:     7 * 24 * time.Hour,
		ExpiryInterval:             time.Minute,
		ShutdownTimeout:            20 * time.Second,
		LogFormat:                  "json",
		LogLevel:                   "info",
	}
}

// Bind registers every field on fs with its current value (from env when
// set) as the default.
func (c *Config) Bind(fs *flag.FlagSet) error {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("flag")
		env := f.Tag.Get("env")
		if env == "" {
			env = "GPUPLANE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		}
		help := f.Tag.Get("help") + " (env " + env + ")"
		fv := v.Field(i)
		if s, ok := os.LookupEnv(env); ok {
			if err := setField(fv, s); err != nil {
				return fmt.Errorf("%s: %w", env, err)
			}
		}
		switch p := fv.Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, name, *p, help)
		case *int:
			fs.IntVar(p, name, *p, help)
		case *float64:
			fs.Float64Var(p, name, *p, help)
		case *time.Duration:
			fs.DurationVar(p, name, *p, help)
		case *bool:
			fs.BoolVar(p, name, *p, help)
		default:
			return fmt.Errorf("config field %s: unsupported type", f.Name)
		}
	}
	return nil
}

func setField(fv reflect.Value, s string) error {
	switch p := fv.Addr().Interface().(type) {
	case *string:
		*p = s
	case *int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		*p = n
	case *float64:
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		*p = n
	case *time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*p = d
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		*p = b
	}
	return nil
}

// Print writes the resolved configuration with secrets redacted: fields
// marked secret (database DSNs, in URL or keyword/value form) are shown
// with every password replaced by "REDACTED" (store.RedactDSN).
func (c Config) Print(w io.Writer) {
	v := reflect.ValueOf(c)
	t := v.Type()
	fmt.Fprintln(w, "gpuplane configuration:")
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		val := fmt.Sprint(v.Field(i).Interface())
		if f.Tag.Get("secret") == "true" {
			val = store.RedactDSN(val)
		}
		fmt.Fprintf(w, "  %-28s %s\n", f.Tag.Get("flag"), val)
	}
}

// TierProfiles are the guardrail profiles of the SHARED and DEDICATED
// tiers: hostcluster's defaults with the configured Pod Security level,
// priority classes and preemptibility values.
func (c Config) TierProfiles() (map[string]hostcluster.TierProfile, error) {
	profiles := hostcluster.DefaultTierProfiles()
	for tier, conf := range map[string]struct{ podSecurity, classes, preemptibility string }{
		hostcluster.TierShared:    {c.SharedPodSecurity, c.SharedPriorityClasses, c.SharedPreemptibility},
		hostcluster.TierDedicated: {c.DedicatedPodSecurity, c.DedicatedPriorityClasses, c.DedicatedPreemptibility},
	} {
		p := profiles[tier]
		p.PodSecurity = conf.podSecurity
		p.PriorityClasses = splitList(conf.classes)
		p.Preemptibility = splitList(conf.preemptibility)
		profiles[tier] = p
	}
	if err := (hostcluster.Settings{TierProfiles: profiles}).ValidateProfiles(); err != nil {
		return nil, fmt.Errorf("invalid configuration (--shared-*/--dedicated-* pod-security, priority-classes, preemptibility): %w", err)
	}
	return profiles, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// AdminGroups splits PlatformAdminGroups.
func (c Config) AdminGroups() []string {
	return splitList(c.PlatformAdminGroups)
}

// ChartVersions is the catalog of vCluster versions the platform offers.
func (c Config) ChartVersions() (vclusterversions.Catalog, error) {
	cat, err := vclusterversions.NewCatalog(c.DefaultChartVersion, splitList(c.VClusterChartVersions), c.DefaultKubernetesVersion)
	if err != nil {
		return cat, fmt.Errorf("invalid configuration: %w", err)
	}
	return cat, nil
}

// keyValues parses "k=v,k2=v2".
func keyValues(flag, s string) (map[string]string, error) {
	var out map[string]string
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("invalid configuration: %s: %q is not key=value", flag, kv)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}
