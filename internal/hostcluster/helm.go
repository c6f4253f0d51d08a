package hostcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"helm.sh/helm/v4/pkg/action"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/registry"
	helmrelease "helm.sh/helm/v4/pkg/release"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"

	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// ChartSource says where the vCluster chart of each version comes from:
// Dirs first, then RepoURL. Production never runs `go mod download`.
type ChartSource struct {
	// Dirs maps chart versions to chart directories or packaged charts on
	// local disk (an air-gapped install; dev mode and tests take them from
	// the Go module cache through internal/devenv/vclusterchart).
	Dirs map[string]string
	// RepoURL is a chart repository (https://charts.loft.sh) or an OCI
	// reference to the chart itself (oci://host/path/vcluster).
	RepoURL string
	// Name of the chart in a RepoURL repository. Default "vcluster".
	Name string
}

// loadedChart is a parsed chart plus a digest of its files, so a changed
// chart at the same version still triggers an upgrade.
type loadedChart struct {
	chart  *chart.Chart
	digest string

	// schema is the chart's values schema, compiled once (compiling the
	// 117 KB vCluster schema took as long as the rest of an install's
	// client-side work); nil when the chart has none or it needs what only
	// Helm's own validation resolves (see compileSchema).
	schemaOnce sync.Once
	schema     *jsonschema.Schema
}

// validate is validateChartValues with the compiled schema.
func (lc *loadedChart) validate(values map[string]any) error {
	lc.schemaOnce.Do(func() { lc.schema = compileSchema(lc.chart) })
	if lc.schema == nil {
		return validateChartValues(lc.chart, values)
	}
	merged, err := chartutil.CoalesceValues(lc.chart, values)
	if err != nil {
		return fmt.Errorf("hostcluster: merge values with chart %s defaults: %w", lc.chart.Name(), err)
	}
	if err := lc.schema.Validate(merged.AsMap()); err != nil {
		// Worded as Helm words it (ValidateAgainstSchema), so the
		// ValuesError reads the same either way.
		detail := strings.TrimPrefix(err.Error(), "jsonschema validation failed with 'file:///values.schema.json#'\n")
		return &ValuesError{Chart: lc.chart.Name(), Version: lc.chart.Metadata.Version, Detail: strings.TrimSpace(lc.chart.Name() + ":\n" + detail)}
	}
	return nil
}

// compileSchema compiles the chart's values.schema.json as Helm does, or
// returns nil to leave validation to Helm: for a chart without a schema,
// with subcharts (validated against their own schemas), or whose schema
// refers to other documents (Helm's loaders fetch those).
func compileSchema(ch *chart.Chart) *jsonschema.Schema {
	if len(ch.Schema) == 0 || len(ch.Dependencies()) > 0 {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ch.Schema))
	if err != nil {
		return nil
	}
	compiler := jsonschema.NewCompiler()
	compiler.UseLoader(noLoader{})
	if err := compiler.AddResource("file:///values.schema.json", doc); err != nil {
		return nil
	}
	schema, err := compiler.Compile("file:///values.schema.json")
	if err != nil {
		return nil
	}
	return schema
}

// noLoader refuses every external document, so a schema that needs one is
// not compiled here (compileSchema) rather than compiled differently.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s not loaded", url)
}

func (c *Client) loadChart(ctx context.Context, version string) (*loadedChart, error) {
	src := c.settings.Chart
	version = vclusterversions.Normalize(version)
	if version == "" {
		return nil, errors.New("hostcluster: the virtual cluster names no chart version")
	}
	c.chartMu.Lock()
	defer c.chartMu.Unlock()
	if lc, ok := c.charts[version]; ok {
		return lc, nil
	}
	var path string
	switch {
	case src.Dirs[version] != "":
		path = src.Dirs[version]
	case src.RepoURL != "":
		var err error
		if path, err = c.downloadChart(src, version); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("hostcluster: no source for vCluster chart %s (configure a chart repository or a directory for it)", version)
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("hostcluster: load chart %s: %w", path, err)
	}
	var files []string
	data := map[string][]byte{}
	for _, f := range ch.Raw {
		files = append(files, f.Name)
		data[f.Name] = f.Data
	}
	sort.Strings(files)
	h := sha256.New()
	for _, name := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data[name]))
		h.Write(data[name])
	}
	lc := &loadedChart{chart: ch, digest: hex.EncodeToString(h.Sum(nil))}
	c.charts[version] = lc
	return lc, nil
}

func (c *Client) downloadChart(src ChartSource, version string) (string, error) {
	settings := cli.New()
	cfg, err := c.helmConfig("default")
	if err != nil {
		return "", err
	}
	reg, err := registry.NewClient(registry.ClientOptEnableCache(true))
	if err != nil {
		return "", fmt.Errorf("hostcluster: registry client: %w", err)
	}
	cfg.RegistryClient = reg
	install := action.NewInstall(cfg)
	install.Version = version
	ref := src.RepoURL
	if !registry.IsOCI(ref) {
		install.RepoURL = src.RepoURL
		ref = src.Name
		if ref == "" {
			ref = "vcluster"
		}
	}
	path, err := install.LocateChart(ref, settings)
	if err != nil {
		return "", fmt.Errorf("hostcluster: fetch chart %s version %s from %s: %w", ref, version, src.RepoURL, err)
	}
	return path, nil
}

// Release-level labels (stored on Helm's release Secret).
const (
	releaseLabelValuesHash = "gpuplane.io/values-hash"
	releaseLabelGeneration = "gpuplane.io/generation"
)

// ReleaseResult says what EnsureRelease did.
type ReleaseResult struct {
	Action     string // "installed", "upgraded" or "unchanged"
	Revision   int
	ValuesHash string
}

// EnsureRelease installs or upgrades the vCluster release <name> in the host
// namespace (which must exist). Values are validated against the chart's
// schema before anything is sent. When the deployed release already has the same values and
// chart (compared by a hash stored as a release label) nothing is sent to the
// API server, so a resync costs one metadata list. It never waits for pods:
// readiness is Observe's business.
func (c *Client) EnsureRelease(ctx context.Context, vc VirtualCluster) (ReleaseResult, error) {
	if err := vc.Validate(); err != nil {
		return ReleaseResult{}, err
	}
	lc, err := c.loadChart(ctx, vc.ChartVersion)
	if err != nil {
		return ReleaseResult{}, err
	}
	values, err := jsonRoundTrip(RenderVClusterValues(vc, c.settings))
	if err != nil {
		return ReleaseResult{}, err
	}
	hash := valuesHash(values, lc.digest)
	res := ReleaseResult{ValuesHash: hash}
	labels := map[string]string{releaseLabelValuesHash: hash, releaseLabelGeneration: fmt.Sprint(vc.Generation)}

	ns, name := NamespaceName(vc.Name), ReleaseName(vc.Name)
	// The common case, a deployed release with these values, is answered
	// from the release records' labels alone; anything else goes through
	// Helm's storage, which decodes the records.
	st, err := c.releaseFromLabels(ctx, vc.Name)
	if err != nil {
		return res, fmt.Errorf("hostcluster: read release %s/%s: %w", ns, name, err)
	}
	if st != nil && st.Status == string(rcommon.StatusDeployed) && st.ValuesHash == hash {
		res.Action, res.Revision = "unchanged", st.Revision
		return res, nil
	}
	cfg, err := c.helmConfig(ns)
	if err != nil {
		return res, err
	}
	last, err := cfg.Releases.Last(name)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return res, fmt.Errorf("hostcluster: read release %s/%s: %w", ns, name, err)
	}
	var status rcommon.Status
	if last != nil {
		acc, err := helmrelease.NewAccessor(last)
		if err != nil {
			return res, err
		}
		status = rcommon.Status(acc.Status())
		res.Revision = acc.Version()
		if status == rcommon.StatusDeployed && acc.Labels()[releaseLabelValuesHash] == hash {
			res.Action = "unchanged"
			return res, nil
		}
		if status.IsPending() {
			// The worker's lease makes it the only one operating on this
			// release, so a pending release is an operation that was
			// interrupted (a worker killed mid-install or mid-upgrade).
			if last, status, err = c.recoverPending(cfg, last, status); err != nil {
				return res, fmt.Errorf("hostcluster: release %s/%s was left %s by an interrupted operation and could not be recovered: %w", ns, name, status, err)
			}
		}
	}
	if last != nil && status != rcommon.StatusUninstalled {
		// helm upgrade refuses a release no revision of which was ever
		// deployed (an install that failed, or whose clean-up above was
		// itself interrupted, leaving it uninstalling): nothing in it is
		// worth keeping, so it is discarded and installed from scratch.
		if _, err := cfg.Releases.Deployed(name); errors.Is(err, driver.ErrNoDeployedReleases) {
			if err := c.discardRelease(cfg, name, string(status)); err != nil {
				return res, fmt.Errorf("hostcluster: release %s/%s was never deployed (%s) and could not be discarded: %w", ns, name, status, err)
			}
			last, status = nil, ""
		} else if err != nil {
			return res, fmt.Errorf("hostcluster: read deployed release %s/%s: %w", ns, name, err)
		}
	}

	// Validated only when something will be sent: values that match the
	// deployed hash were validated when they were deployed, and compiling
	// the 117 KB vCluster schema is the most expensive part of a resync.
	if err := lc.validate(values); err != nil {
		return res, err
	}
	timeout := c.helmTimeout(ctx)
	if last == nil || status == rcommon.StatusUninstalled {
		in := action.NewInstall(cfg)
		in.ReleaseName = name
		in.Namespace = ns
		in.Labels = labels
		in.Replace = last != nil // reuse the name of an uninstalled release kept in history
		in.WaitStrategy = kube.HookOnlyStrategy
		in.Timeout = timeout
		in.ForceConflicts = true
		in.SkipSchemaValidation = true // done above, with a clearer error
		// Helm's client-side OpenAPI check downloads and parses the server's
		// OpenAPI documents on every run (about two thirds of an install's
		// CPU); its server-side apply is sent with fieldValidation=Strict, so
		// the API server rejects the same mistakes anyway.
		in.DisableOpenAPIValidation = true
		in.Description = fmt.Sprintf("gpuplane generation %d", vc.Generation)
		rel, err := in.RunWithContext(ctx, lc.chart, values)
		if err != nil {
			return res, fmt.Errorf("hostcluster: helm install %s/%s: %w", ns, name, err)
		}
		res.Action = "installed"
		res.Revision = releaseVersion(rel)
		return res, nil
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = ns
	up.Labels = labels
	up.WaitStrategy = kube.HookOnlyStrategy
	up.Timeout = timeout
	up.ServerSideApply = "true"
	up.ForceConflicts = true
	up.MaxHistory = 5
	up.SkipSchemaValidation = true
	up.DisableOpenAPIValidation = true // see install above
	up.Description = fmt.Sprintf("gpuplane generation %d", vc.Generation)
	rel, err := up.RunWithContext(ctx, name, lc.chart, values)
	if err != nil {
		return res, fmt.Errorf("hostcluster: helm upgrade %s/%s: %w", ns, name, err)
	}
	res.Action = "upgraded"
	res.Revision = releaseVersion(rel)
	return res, nil
}

// UninstallRelease removes the release and its history; a missing release is
// success.
func (c *Client) UninstallRelease(ctx context.Context, vcName string) error {
	ns, name := NamespaceName(vcName), ReleaseName(vcName)
	cfg, err := c.helmConfig(ns)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.IgnoreNotFound = true
	un.WaitStrategy = kube.HookOnlyStrategy
	un.Timeout = c.helmTimeout(ctx)
	if _, err := un.Run(name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("hostcluster: helm uninstall %s/%s: %w", ns, name, err)
	}
	return nil
}

func releaseVersion(rel helmrelease.Releaser) int {
	if acc, err := helmrelease.NewAccessor(rel); err == nil {
		return acc.Version()
	}
	return 0
}

// helmTimeout bounds Helm's own operations by the caller's deadline.
func (c *Client) helmTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); left > 0 {
			return left
		}
	}
	return 5 * time.Minute
}

// valuesHash identifies a (values, chart) pair. It is cut to fit a label
// value (63 characters).
func valuesHash(values map[string]any, chartDigest string) string {
	data, _ := json.Marshal(values) // maps marshal with sorted keys
	h := sha256.New()
	h.Write(data)
	h.Write([]byte{0})
	h.Write([]byte(chartDigest))
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// helmConfig builds a Helm action configuration for one namespace. The
// discovery cache and REST mapper are shared across namespaces; Helm itself
// invalidates discovery once per install or upgrade.
func (c *Client) helmConfig(namespace string) (*action.Configuration, error) {
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(c.log.Handler()))
	getter := &restGetter{config: c.config, discovery: c.discovery, mapper: c.mapper, namespace: namespace}
	if err := cfg.Init(getter, namespace, "secret"); err != nil {
		return nil, fmt.Errorf("hostcluster: helm configuration: %w", err)
	}
	d := newReleaseSecrets(c.kube.CoreV1().Secrets(namespace), func(s *corev1.Secret) { c.wrote(secretsGVR, s) })
	d.SetLogger(c.log.Handler())
	cfg.Releases = storage.Init(d)
	return cfg, nil
}

// restGetter adapts a *rest.Config to the RESTClientGetter Helm expects
// (normally built from a kubeconfig file and CLI flags).
type restGetter struct {
	config    *rest.Config
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
	namespace string
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.config), nil }
func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.discovery, nil
}
func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }
func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return namespaceClientConfig{getter: g}
}

// namespaceClientConfig only answers what Helm asks of a kubeconfig: the
// REST config and the default namespace.
type namespaceClientConfig struct{ getter *restGetter }

func (n namespaceClientConfig) RawConfig() (clientcmdapi.Config, error) {
	return clientcmdapi.Config{}, nil
}
func (n namespaceClientConfig) ClientConfig() (*rest.Config, error) {
	return n.getter.ToRESTConfig()
}
func (n namespaceClientConfig) Namespace() (string, bool, error) {
	return n.getter.namespace, true, nil
}
func (n namespaceClientConfig) ConfigAccess() clientcmd.ConfigAccess {
	return clientcmd.NewDefaultClientConfigLoadingRules()
}

func newDiscovery(config *rest.Config) (discovery.CachedDiscoveryInterface, meta.RESTMapper, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, nil, err
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
	return cached, mapper, nil
}

// recoverPending finishes what an interrupted Helm operation left behind.
// An interrupted first install is uninstalled, so it is installed again
// from scratch (nothing in it is worth keeping: it never became ready). An
// interrupted upgrade or rollback is marked failed, so the next upgrade
// proceeds from the last deployed revision and keeps the virtual cluster's
// data.
func (c *Client) recoverPending(cfg *action.Configuration, last helmrelease.Releaser, status rcommon.Status) (helmrelease.Releaser, rcommon.Status, error) {
	rel, ok := last.(*releasev1.Release)
	if !ok {
		return last, status, fmt.Errorf("unexpected release type %T", last)
	}
	if status == rcommon.StatusPendingInstall {
		if err := c.discardRelease(cfg, rel.Name, string(status)); err != nil {
			return last, status, err
		}
		return nil, "", nil
	}
	rel.SetStatus(rcommon.StatusFailed, "interrupted "+string(status)+"; marked failed by gpuplane to retry")
	if err := cfg.Releases.Update(rel); err != nil {
		return last, status, err
	}
	c.log.Warn("marked a release left "+string(status)+" by an interrupted operation as failed", "release", rel.Name, "namespace", rel.Namespace)
	return rel, rcommon.StatusFailed, nil
}

// discardRelease uninstalls a release that never became ready, with its
// history and without hooks, so it is installed again from scratch.
func (c *Client) discardRelease(cfg *action.Configuration, name, status string) error {
	un := action.NewUninstall(cfg)
	un.KeepHistory = false
	un.WaitStrategy = kube.HookOnlyStrategy
	un.DisableHooks = true
	if _, err := un.Run(name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return err
	}
	c.log.Warn("uninstalled a release that was never deployed ("+status+"), to install it again", "release", name)
	return nil
}
