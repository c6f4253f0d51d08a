package hostcluster

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// slowBody delays every read of a watch response, as a slow network
// between the worker and the API server would.
type slowBody struct {
	io.ReadCloser
	delay time.Duration
}

func (s slowBody) Read(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.ReadCloser.Read(p)
}

type slowWatches struct {
	next  http.RoundTripper
	delay time.Duration
}

func (s slowWatches) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err == nil && r.URL.Query().Get("watch") == "true" {
		resp.Body = slowBody{ReadCloser: resp.Body, delay: s.delay}
	}
	return resp, err
}

// TestObserveSeesItsOwnWrites: Observe reads from watch caches, and an
// Observe right after an Apply must still report what the Apply wrote,
// however late the watch events arrive (here: every read of a watch
// stream delayed by half a second). A change made behind the client's back
// is seen once the caches caught up (Sync).
func TestObserveSeesItsOwnWrites(t *testing.T) {
	h := newHarness(t)
	cfg := rest.CopyConfig(h.config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return slowWatches{next: rt, delay: 500 * time.Millisecond}
	})
	c, err := New(cfg, Options{Settings: h.client.settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	vc := testVC(h.n("ryw"), "vision", h.n("ryw-dept"), TierShared)
	if _, err := c.Apply(h.ctx, vc); err != nil {
		t.Fatal(err)
	}
	o, err := c.Observe(h.ctx, vc)
	if err != nil {
		t.Fatal(err)
	}
	if !o.NamespaceExists || !o.QueuesInSync() || !o.GuardrailsPresent || !o.NetworkPolicyPresent || !o.ReleaseDeployed() || !o.ReleaseUpToDate {
		t.Fatalf("observed right after apply: %+v", o)
	}
	if ok, err := c.Unchanged(h.ctx, vc, o); err != nil || !ok {
		t.Errorf("right after apply: unchanged %v (%v), want true", ok, err)
	}

	// A hand edit, then a resync: seen once the caches caught up.
	patch := []byte(`{"spec":{"resources":{"gpu":{"quota":8}}}}`)
	if _, err := h.dyn.Resource(QueueGVR).Patch(h.ctx, LeafQueueName(vc.Name), types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(h.ctx); err != nil {
		t.Fatal(err)
	}
	if o, err = c.Observe(h.ctx, vc); err != nil {
		t.Fatal(err)
	}
	if o.QueuesInSync() || !strings.Contains(strings.Join(o.Queues[2].Drift, ";"), "resources.gpu.quota: want 2, have 8") {
		t.Errorf("drift not seen after Sync: %+v", o.Queues)
	}
	if ok, err := c.Unchanged(h.ctx, vc, o); err != nil || ok {
		t.Errorf("after a hand edit: unchanged %v (%v), want false", ok, err)
	}
}

// The end of a watch that the reflector already replaced (its goroutine
// ran late) must not mark the cache as no longer following the server:
// reads would then fail until that watch, too, ended minutes later.
func TestALateWatchEndKeepsTheCacheFresh(t *testing.T) {
	w := newWatched("things")
	first := w.opened()
	second := w.opened()
	w.ended(first)
	if !w.watching {
		t.Fatal("the end of a replaced watch marked the cache stale")
	}
	w.ended(second)
	if w.watching {
		t.Fatal("the end of the open watch left the cache marked fresh")
	}
}

// lateSyncInformer is an informer that calls itself synced when its test
// says so, without an event: as client-go's does, from a goroutine of its
// own after the initial list's last event was handed out.
type lateSyncInformer struct {
	cache.SharedIndexInformer // nil: only the methods below are called
	synced                    chan struct{}
}

func (l *lateSyncInformer) HasSynced() bool {
	select {
	case <-l.synced:
		return true
	default:
		return false
	}
}

func (l *lateSyncInformer) HasSyncedChecker() cache.DoneChecker { return l }
func (l *lateSyncInformer) Name() string                        { return "late" }
func (l *lateSyncInformer) Done() <-chan struct{}               { return l.synced }

// A read waiting for a cache whose watch is open must return as soon as
// the informer is synced, even when no event or watch change follows (a
// resource with no objects): in CI such reads waited out the one-minute
// deadline and failed the Apply.
func TestReadyWhenSyncedAfterTheLastSignal(t *testing.T) {
	w := newWatched("things")
	inf := &lateSyncInformer{synced: make(chan struct{})}
	w.informer = inf
	w.opened() // the last signal: the watch is open, the informer not yet synced
	done := make(chan error, 1)
	go func() { done <- w.ready(t.Context()) }()
	select {
	case err := <-done:
		t.Fatalf("ready before the informer synced: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(inf.synced)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ready still waiting 10s after the informer synced")
	}
}
