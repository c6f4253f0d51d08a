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
