package reconcile_test

// Benchmarks of approve -> applied on a real API server, against the
// baseline of a bare Helm install of the same chart with the same values.
//
//	go test ./internal/reconcile/ -run '^$' -bench . -benchtime 3x
//
// s/vc is wall time per virtual cluster from "approved" to "the host
// reflects it" (ReleaseDeployed and QueuesReady true at the current
// generation), with the worker's production Poll (1s) and concurrency 8.
// Approvals happen before the timer starts; their cost is reported as
// approve-s/vc.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
)

// benchChart is the chart the benchmarks install: the default for new
// virtual clusters (app.Defaults).
const benchChart = "0.36.1"

// benchSpec is a small CPU-only virtual cluster of team-a: a hundred fit in
// its quota.
func benchSpec() *pb.VirtualClusterSpec { return vcSpec("0", 10, 0) }

// benchWorker is the worker as deployed (Poll and Lease defaults) with
// concurrency 8.
func benchWorker(h *harness, host reconcile.Host) *reconcile.Worker {
	return reconcile.New(store.New(h.pool), host, discard, reconcile.Config{ID: "bench", Concurrency: 8, Resync: time.Hour})
}

// appliedCount counts the virtual clusters among ids whose current
// generation the host reflects.
func (h *harness) appliedCount(tb testing.TB, ids []string) int {
	var n int
	err := h.pool.QueryRow(h.ctx, `SELECT count(*) FROM virtual_clusters WHERE id = ANY($1)
		AND observed_generation = generation
		AND conditions @> '[{"type": "ReleaseDeployed", "status": "TRUE"}, {"type": "QueuesReady", "status": "TRUE"}]'`, ids).Scan(&n)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func BenchmarkProvision(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			h := newHarness(b, harnessOptions{})
			host := h.newHost(nil)
			w := benchWorker(h, host)

			// Warm up as a running worker would be: chart loaded, API
			// discovery cached, parent queues present.
			h.createVC(b, "team-a", "warmup", benchSpec())
			h.runOnce(b, w)
			if h.appliedCount(b, []string{"warmup"}) != 1 {
				b.Fatalf("warm-up not applied: %s", describe(h.vc(b, "warmup")))
			}

			var timed, approving time.Duration
			seq := 0
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				var ids []string
				start := time.Now()
				for range n {
					seq++
					id := fmt.Sprintf("b%d-%03d", n, seq)
					ids = append(ids, id)
					h.createVC(b, "team-a", id, benchSpec())
				}
				approving += time.Since(start)

				ctx, cancel := context.WithCancel(h.ctx)
				done := make(chan struct{})
				b.StartTimer()
				start = time.Now()
				go func() { defer close(done); _ = w.Run(ctx) }()
				for h.appliedCount(b, ids) < n {
					time.Sleep(5 * time.Millisecond)
				}
				timed += time.Since(start)
				b.StopTimer()
				cancel()
				<-done
				// Finish untimed: control planes up, READY, out of the queue,
				// so the next iteration does not re-poll them.
				for _, id := range ids {
					h.markReady(b, id)
				}
				stop := h.start(b, w)
				for _, id := range ids {
					h.waitVC(b, id, 5*time.Minute, "READY", readyAt)
				}
				stop()
			}
			vcs := float64(b.N * n)
			b.ReportMetric(timed.Seconds()/vcs, "s/vc")
			b.ReportMetric(approving.Seconds()/vcs, "approve-s/vc")
			b.ReportMetric(timed.Seconds()/float64(b.N), "s/batch")
		})
	}
}

// BenchmarkHelmInstall is the baseline: a plain Helm SDK install (defaults
// of action.NewInstall, as `helm install` would do it: server-side apply,
// schema and OpenAPI validation, hook-only wait) of the same chart with the
// values the worker renders for the same virtual cluster, into an existing
// namespace on the same kind of API server. Nothing else: no queues,
// policies, network policy or status.
func BenchmarkHelmInstall(b *testing.B) {
	h := newHarness(b, harnessOptions{})
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	if err := h.api.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	chartDir, err := vclusterchart.Dir(h.ctx, benchChart)
	if err != nil {
		b.Fatal(err)
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		b.Fatal(err)
	}
	getter, err := newKubeconfigGetter(h.rc, kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	settings := hostcluster.Settings{Chart: hostcluster.ChartSource{Dirs: map[string]string{benchChart: chartDir}}}
	install := func(i int, timed bool) {
		vc := hostcluster.VirtualCluster{
			Name: fmt.Sprintf("helm-%03d", i), Team: "team-a", Department: "research", Tier: hostcluster.TierShared,
			Leaf:              hostcluster.QueueSpec{Quota: hostcluster.Quantities{CPUMillis: 10}, OverQuotaWeight: 1, Priority: 100},
			KubernetesVersion: "v1.36.0", ChartVersion: benchChart, Generation: 1,
		}
		ns := hostcluster.NamespaceName(vc.Name)
		if _, err := h.kube.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		values := hostcluster.RenderVClusterValues(vc, settings)
		if timed {
			b.StartTimer()
		}
		cfg := action.NewConfiguration()
		if err := cfg.Init(getter.forNamespace(ns), ns, "secret"); err != nil {
			b.Fatal(err)
		}
		in := action.NewInstall(cfg)
		in.ReleaseName = hostcluster.ReleaseName(vc.Name)
		in.Namespace = ns
		in.WaitStrategy = kube.HookOnlyStrategy
		in.Timeout = 5 * time.Minute
		if _, err := in.RunWithContext(h.ctx, ch, values); err != nil {
			b.Fatal(err)
		}
		if timed {
			b.StopTimer()
		}
	}
	install(0, false) // warm-up, as for the worker
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		install(i+1, true)
	}
}

// kubeconfigGetter is the RESTClientGetter `helm` builds from a kubeconfig
// file, with discovery shared across installs (as the worker shares it).
type kubeconfigGetter struct {
	rc         *rest.Config
	kubeconfig string
	discovery  discovery.CachedDiscoveryInterface
	mapper     meta.RESTMapper
	namespace  string
}

func newKubeconfigGetter(rc *rest.Config, kubeconfig string) (*kubeconfigGetter, error) {
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClient(dc)
	return &kubeconfigGetter{rc: rc, kubeconfig: kubeconfig, discovery: cached,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(cached)}, nil
}

func (g *kubeconfigGetter) forNamespace(ns string) *kubeconfigGetter {
	c := *g
	c.namespace = ns
	return &c
}

func (g *kubeconfigGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.rc), nil }
func (g *kubeconfigGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.discovery, nil
}
func (g *kubeconfigGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }
func (g *kubeconfigGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: g.kubeconfig},
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}})
}
