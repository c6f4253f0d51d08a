package hostcluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

// One API server for the whole package: starting one takes seconds, and
// every test uses its own virtual cluster names. It is started on first use
// so the pure render tests do not need the binaries.
var shared struct {
	once sync.Once
	env  *envtestenv.Env
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		_ = shared.env.Stop()
	}
	os.Exit(code)
}

var (
	runsMu sync.Mutex
	runs   = map[string]int{}
)

// n makes a name unique to this run of the test.
func (h *harness) n(base string) string { return base + h.sfx }

type harness struct {
	sfx    string // "" on a test's first run, "-<n>" when -count repeats it
	t      testing.TB
	ctx    context.Context
	config *rest.Config
	client *Client
	kube   kubernetes.Interface
	dyn    dynamic.Interface
}

// newHarness fails (never skips) when the API server cannot start, so a
// machine without the envtest binaries cannot report these tests as passed.
func newHarness(t testing.TB) *harness {
	t.Helper()
	envtestenv.SkipIfShort(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.env, shared.err = envtestenv.Start(ctx, envtestenv.Options{})
	})
	if shared.err != nil {
		t.Fatalf("real API server needed: %v", shared.err)
	}
	return newHarnessOn(t, shared.env)
}

// newHarnessOn is a harness on env, an API server of the test's own.
func newHarnessOn(t testing.TB, env *envtestenv.Env) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	dirs, err := vclusterchart.Dirs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.RESTConfig()
	c, err := New(cfg, Options{Settings: Settings{Chart: ChartSource{Dirs: dirs}, IngressNamespaces: []string{"gpuplane-system"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	runsMu.Lock()
	runs[t.Name()]++
	sfx := ""
	if n := runs[t.Name()]; n > 1 {
		sfx = fmt.Sprintf("-%d", n) // namespaces never finish terminating here
	}
	runsMu.Unlock()
	return &harness{
		sfx: sfx, t: t, ctx: ctx, config: cfg, client: c,
		kube: kubernetes.NewForConfigOrDie(cfg), dyn: dynamic.NewForConfigOrDie(cfg),
	}
}

// sync makes the client's watch caches reflect a change the test made
// behind its back (Client.Sync), before the next Observe.
func (h *harness) sync() {
	h.t.Helper()
	if err := h.client.Sync(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) apply(vc VirtualCluster) Steps {
	h.t.Helper()
	steps, err := h.client.Apply(h.ctx, vc)
	if err != nil {
		h.t.Fatalf("apply %s: %v (steps %+v)", vc.Name, err, steps)
	}
	return steps
}

// markQuotaObserved plays kube-controller-manager's part: without a
// status the ResourceQuota admission plugin refuses every pod.
func (h *harness) markQuotaObserved(vc VirtualCluster) {
	h.t.Helper()
	ns := NamespaceName(vc.Name)
	rq, err := h.kube.CoreV1().ResourceQuotas(ns).Get(h.ctx, "vc-"+ReleaseName(vc.Name), metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("vCluster chart should have created a ResourceQuota: %v", err)
	}
	rq.Status.Hard = rq.Spec.Hard
	rq.Status.Used = corev1.ResourceList{}
	for k := range rq.Spec.Hard {
		rq.Status.Used[k] = resource.MustParse("0")
	}
	if _, err := h.kube.CoreV1().ResourceQuotas(ns).UpdateStatus(h.ctx, rq, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) queue(name string) (map[string]any, error) {
	q, err := h.dyn.Resource(QueueGVR).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return q.Object, nil
}

type podOpt func(*corev1.Pod)

func gpus(n string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{NvidiaGPUResource: resource.MustParse(n)}
	}
}
func kai(p *corev1.Pod) { p.Spec.SchedulerName = KAISchedulerName }
func queueLabel(q string) podOpt {
	return func(p *corev1.Pod) { p.Labels[KAIQueueLabel] = q }
}
func annotation(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Annotations[k] = v }
}

var podSeq int

func (h *harness) createPod(vc VirtualCluster, opts ...podOpt) (*corev1.Pod, error) {
	podSeq++
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("p%d", podSeq),
			Labels:      map[string]string{vclusterMarkerLabel: vc.Name},
			Annotations: map[string]string{},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return h.kube.CoreV1().Pods(NamespaceName(vc.Name)).Create(h.ctx, p, metav1.CreateOptions{})
}

func mustBeDenied(t *testing.T, what string, err error, wantInMessage ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted, want denied", what)
		return
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Errorf("%s: unexpected error kind: %v", what, err)
	}
	for _, s := range wantInMessage {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: message %q does not contain %q", what, err, s)
		}
	}
}
