// Package envtestenv runs a real kube-apiserver + etcd (controller-runtime's
// envtest) for tests and for dev mode. It exists so that admission policies,
// CRD schemas and server-side apply are exercised by the same code that runs
// in a real cluster instead of a fake client.
//
// The binaries are not downloaded (the usual download is not reachable from
// every machine): hack/envtest-assets.sh builds them from the Go module proxy
// and caches them per version. Tests must fail, not skip, when they are
// missing, so a machine without them cannot report a green run it never ran.
package envtestenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gpuplane/gpuplane/deploy/crds"
	"github.com/gpuplane/gpuplane/internal/devenv/lifeline"
)

// Versions built by hack/envtest-assets.sh; keep in sync with that script.
const (
	KubernetesVersion = "1.37.2"
	EtcdVersion       = "3.6.16"
)

// Options configures Start. The zero value starts a server with the KAI Queue
// CRD fixture installed.
type Options struct {
	// AssetsDir holds the kube-apiserver and etcd binaries. Empty means
	// $KUBEBUILDER_ASSETS, else DefaultAssetsDir().
	AssetsDir string
	// CRDDirs are extra directories of CRD manifests. The KAI Queue fixture
	// (CRDDir) is always installed, so callers need not list it.
	CRDDirs []string
	// ExtraAPIServerArgs are kube-apiserver flags in "--name=value" form
	// (e.g. the --oidc-* flags); a repeated name appends another value.
	ExtraAPIServerArgs []string
	// DurableEtcd runs etcd as in production, syncing its WAL before it
	// answers (envtest's default is --unsafe-no-fsync): for benchmarks that
	// compare against a durable database.
	DurableEtcd bool
	// Logf, when set, receives progress and the control plane's output
	// location; nil keeps Start quiet.
	Logf func(format string, args ...any)
}

// Env is a running API server. Stop it when done; it owns temp directories
// and two child processes, which also die (through a lifeline) if this
// process dies without stopping them.
type Env struct {
	env    *envtest.Environment
	config *rest.Config
	logf   func(string, ...any)
	line   *lifeline.Line
}

// DefaultAssetsDir is where hack/envtest-assets.sh caches the binaries:
// $GPUPLANE_CACHE_DIR or $XDG_CACHE_HOME/gpuplane or ~/.cache/gpuplane,
// then envtest/k8s-<version>-etcd-<version>.
func DefaultAssetsDir() string {
	root := os.Getenv("GPUPLANE_CACHE_DIR")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				home = os.TempDir()
			}
			cache = filepath.Join(home, ".cache")
		}
		root = filepath.Join(cache, "gpuplane")
	}
	return filepath.Join(root, "envtest", fmt.Sprintf("k8s-%s-etcd-%s", KubernetesVersion, EtcdVersion))
}

// ErrAssetsMissing is wrapped by Start's error when the binaries are absent,
// so callers can tell "not built yet" from "failed to start".
var ErrAssetsMissing = errors.New("envtest binaries missing")

// AssetsDir resolves the directory Start would use and checks that both
// binaries are there.
func AssetsDir(explicit string) (string, error) {
	dir, from := explicit, "Options.AssetsDir"
	if dir == "" {
		dir, from = os.Getenv("KUBEBUILDER_ASSETS"), "$KUBEBUILDER_ASSETS"
	}
	if dir == "" {
		dir, from = DefaultAssetsDir(), "the default cache directory"
	}
	var missing []string
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		st, err := os.Stat(filepath.Join(dir, bin))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return dir, fmt.Errorf("%w: %s not found in %s (from %s); build them once per machine with `hack/envtest-assets.sh` or `make envtest` (kube-apiserver v%s, etcd v%s, about 6 minutes), or point KUBEBUILDER_ASSETS at a directory holding them",
			ErrAssetsMissing, strings.Join(missing, " and "), dir, from, KubernetesVersion, EtcdVersion)
	}
	return dir, nil
}

// Start launches etcd and kube-apiserver and installs the CRDs. It honours
// ctx only while starting; the server then lives until Stop.
//
// MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) is GA and on by
// default from Kubernetes 1.36, and ValidatingAdmissionPolicy since 1.30, so
// the v1.37 server built by hack/envtest-assets.sh needs no feature gate or
// runtime-config for either. Older binaries supplied through
// KUBEBUILDER_ASSETS simply lack MutatingAdmissionPolicy; hostcluster
// discovers that and falls back to validation only.
func Start(ctx context.Context, opts Options) (*Env, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	assets, err := AssetsDir(opts.AssetsDir)
	if err != nil {
		return nil, err
	}
	queueCRDs, err := CRDDir()
	if err != nil {
		return nil, err
	}

	te := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     append([]string{queueCRDs}, opts.CRDDirs...),
		ErrorIfCRDPathMissing: true,
	}
	if deadline, ok := ctx.Deadline(); ok {
		// envtest has no context; map the caller's deadline onto its timeouts.
		if d := time.Until(deadline); d > 0 {
			te.ControlPlaneStartTimeout = d
		}
	}
	api := te.ControlPlane.GetAPIServer()
	// envtest's default service range is a /24: 254 addresses, and every
	// vCluster release takes Services, so a few hundred virtual clusters
	// (a provisioning benchmark, a long test binary) fill it and then every
	// install fails with "range is full". A /16 is what a real cluster
	// would have at least.
	api.Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
	for _, arg := range opts.ExtraAPIServerArgs {
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if name == "" {
			return nil, fmt.Errorf("envtestenv: bad API server argument %q: want --name=value", arg)
		}
		if hasValue {
			api.Configure().Append(name, value)
		} else {
			api.Configure().Enable(name)
		}
	}

	// envtest starts etcd and kube-apiserver in process groups of their
	// own (so a terminal's Ctrl-C leaves them to Stop) and offers no hook
	// into their exec.Cmd; they run through lifeline wrappers instead,
	// which record them so that they die with this process even when it is
	// SIGKILLed. Their state is thrown away, so SIGKILL is the signal.
	line, err := lifeline.Start(lifeline.Options{Name: "envtest", Signal: "KILL"})
	if err != nil {
		return nil, err
	}
	// Explicit paths: envtest would otherwise let $KUBEBUILDER_ASSETS or
	// $TEST_ASSET_* win over the directory we just checked.
	apiPath, err := line.Wrap(filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		_ = line.Release()
		return nil, err
	}
	etcdPath, err := line.Wrap(filepath.Join(assets, "etcd"))
	if err != nil {
		_ = line.Release()
		return nil, err
	}
	api.Path = apiPath
	te.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath}
	if opts.DurableEtcd {
		te.ControlPlane.Etcd.Configure().Set("unsafe-no-fsync", "false")
	}

	started := time.Now()
	type result struct {
		cfg *rest.Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		cfg, err := te.Start()
		done <- result{cfg, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			_ = stop(te, line)
			return nil, fmt.Errorf("envtestenv: start kube-apiserver v%s from %s: %w", KubernetesVersion, assets, r.err)
		}
		// Known only now; the lifeline deletes them if Stop never runs.
		for _, dir := range []string{api.CertDir, te.ControlPlane.Etcd.DataDir} {
			if err := line.RemoveOnExit(dir); err != nil {
				_ = stop(te, line)
				return nil, err
			}
		}
		logf("envtestenv: kube-apiserver ready at %s in %s (binaries: %s)", r.cfg.Host, time.Since(started).Round(time.Millisecond), assets)
		return &Env{env: te, config: r.cfg, logf: logf, line: line}, nil
	case <-ctx.Done():
		// Wait for Start to return so no processes outlive the caller.
		go func() {
			<-done
			_ = stop(te, line)
		}()
		return nil, fmt.Errorf("envtestenv: start: %w", ctx.Err())
	}
}

// RESTConfig returns a fresh copy of the admin (system:masters) client
// configuration, so callers may tune QPS or user agent freely.
func (e *Env) RESTConfig() *rest.Config {
	return rest.CopyConfig(e.config)
}

// Kubeconfig returns an admin kubeconfig for the server, with certificates
// embedded so it does not depend on envtest's temp directory layout.
func (e *Env) Kubeconfig() []byte {
	return append([]byte(nil), e.env.KubeConfig...)
}

// WriteKubeconfig writes the admin kubeconfig to path (mode 0600: it holds a
// client key), so `kubectl --kubeconfig path` works against the server.
func (e *Env) WriteKubeconfig(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, e.env.KubeConfig, 0o600)
}

// Stop terminates the API server and etcd and removes their data. Safe to
// call more than once.
func (e *Env) Stop() error {
	if e == nil || e.env == nil {
		return nil
	}
	err := stop(e.env, e.line)
	e.env = nil
	return err
}

// stop stops the control plane, then disarms the lifeline; if the orderly
// stop failed, the lifeline kills whatever is left.
func stop(te *envtest.Environment, line *lifeline.Line) error {
	err := te.Stop()
	if err != nil {
		return errors.Join(err, line.Cut())
	}
	return line.Release()
}

var (
	crdDirOnce sync.Once
	crdDir     string
	crdDirErr  error
)

// CRDDir returns a directory holding gpuplane's CRD fixtures (the KAI Queue
// CRD), written once per process from the embedded copy so it works from any
// working directory and from a shipped binary in dev mode.
func CRDDir() (string, error) {
	crdDirOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpuplane-crds-")
		if err != nil {
			crdDirErr = err
			return
		}
		crdDirErr = fs.WalkDir(crds.FS, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := crds.FS.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o644)
		})
		crdDir = dir
	})
	return crdDir, crdDirErr
}

// SkipIfShort skips a test that needs a real kube-apiserver when it runs
// under `go test -short` (make test-unit). make test, and so CI, never
// passes -short: there these tests run, and fail without the binaries.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd (envtest); make test runs it")
	}
}
