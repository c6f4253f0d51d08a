package hostcluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Watch caches of what the worker reads on a host cluster.
//
// A resync of a virtual cluster nobody touched must cost the API server
// (next to) nothing: at 10,000 virtual clusters and a resync every five
// minutes, reading its ~15 objects with GETs would be 500 requests a second
// forever, and a client-side rate limit would make the resync take far
// longer than its interval. So the Client keeps one watch per kind of
// object it reads, label-selected to what gpuplane owns (or the vCluster
// chart it installs writes), and Observe, Unchanged and the checks inside
// Apply read from those caches: "unchanged" is decided in memory, and only
// drift or a new generation costs API calls (the writes that repair it).
// Where the spec and status are not needed the watch is metadata-only.
//
// Two things keep cached reads as good as GETs:
//
//   - Freshness: a cache is read only while its watch is open (the list
//     that fills it done, the watch that follows it not failed or closed);
//     otherwise the read waits briefly for the reflector to reconnect and
//     then fails with why, so an outage or a missing permission fails the
//     reconcile instead of answering from an old copy.
//   - Read your writes: every object this Client writes is remembered with
//     the resourceVersion the API server answered, and a read of it waits
//     until the cache holds that version or a later one (resource versions
//     are comparable, k8s.io/apimachinery/pkg/util/resourceversion), so the
//     Observe that follows an Apply sees what the Apply wrote.
//
// The caches start on first use (the API server's Client, which only
// reads kubeconfig Secrets and nodes, never starts them) and stop with
// Close.

// reconnectWait bounds how long a read waits for a watch that is
// reconnecting (watches end after a few minutes by design and are reopened
// at once). A failed list or watch fails the read at once instead. Longer
// waits hold a worker's lease through a host outage: the outage test's
// recovery missed its bound at 10 s.
const reconnectWait = 3 * time.Second

// writeWait bounds how long a read waits for the event of a write of this
// Client (it normally arrives within milliseconds; an object deleted since
// never sends it).
const writeWait = 3 * time.Second

// cacheSyncTimeout bounds how long the first read waits for the caches'
// initial lists.
var cacheSyncTimeout = time.Minute

// Label selectors of the watches.
const (
	selectManaged = LabelManagedBy + "=" + ManagedByValue
	// The vCluster chart labels its StatefulSet and Services app=vcluster.
	selectVCluster = "app=vcluster"
	// Helm's release records of gpuplane's releases (EnsureRelease sets the
	// values-hash label on every revision it installs).
	selectReleases = "owner=helm," + releaseLabelValuesHash
	// vCluster 0.36.1 labels the admin kubeconfig Secret it writes
	// app=vcluster, vcluster-name=<name> (pkg/util/kubeconfig); 0.20 sets
	// no labels, and such Secrets are read directly (kubeconfigSecret).
	selectKubeconfigs = "app=vcluster,vcluster-name"
)

var (
	namespacesGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	networkPoliciesGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	statefulSetsGVR    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	servicesGVR        = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

// hostCaches are the Client's watch caches (nil until started).
type hostCaches struct {
	// repair is signalled when a shared guardrail object this Client
	// applied was deleted or changed by someone else.
	repair chan struct{}
	byGVR  map[schema.GroupVersionResource]*watched
	// kubeconfigs is a second watch of Secrets (the release records are
	// the first), of the admin kubeconfig Secrets vCluster writes.
	kubeconfigs *watched
	cancel      context.CancelFunc
	done        sync.WaitGroup
}

// watched is one watch cache and its state.
type watched struct {
	what     string // for messages: "namespaces"
	informer cache.SharedIndexInformer
	lw       *listWatch

	mu sync.Mutex
	// watching: a watch is open, so the cache follows the server.
	watching bool
	// watches counts the watches opened (ended ignores all but the last).
	watches int
	// err is why the last list or watch failed (nil once a watch opened).
	err error
	// changed is closed (and replaced) whenever the cache or its state
	// changes, waking readers waiting for either.
	changed chan struct{}
	// written holds, by cache key, the resourceVersion of an object this
	// Client wrote whose event has not arrived yet.
	written map[string]string
}

func newWatched(what string) *watched {
	return &watched{what: what, changed: make(chan struct{}), written: map[string]string{}}
}

// signal wakes waiting readers; mu must be held.
func (w *watched) signal() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *watched) setState(watching bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watching, w.err = watching, err
	w.signal()
}

// opened records a watch that just opened and returns its number.
func (w *watched) opened() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watches++
	w.watching, w.err = true, nil
	w.signal()
	return w.watches
}

// ended records the end of watch n. The reflector may have opened the
// next one before the last one's end is seen: then nothing changes.
func (w *watched) ended(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n == w.watches {
		w.watching = false
		w.signal()
	}
}

// observed is the event handler: it clears a pending write the event
// catches up with and wakes readers.
func (w *watched) observed(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if want, ok := w.written[key]; ok {
		if m, err := metaOf(obj); err != nil || atLeast(m.GetResourceVersion(), want) {
			delete(w.written, key)
		}
	}
	w.signal()
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T is no object", obj)
	}
	return m, nil
}

// atLeast reports whether resource version have is want or later; versions
// that do not compare (not from etcd) count as caught up.
func atLeast(have, want string) bool {
	c, err := resourceversion.CompareResourceVersion(have, want)
	return err != nil || c >= 0
}

// listWatch is a ListerWatcher that reports its state to a watched.
type listWatch struct {
	w        *watched
	selector string
	list     func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	watch    func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func (l *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.LabelSelector = l.selector
	obj, err := l.list(ctx, opts)
	if err != nil {
		l.w.setState(false, err)
	}
	return obj, err
}

func (l *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.LabelSelector = l.selector
	inner, err := l.watch(ctx, opts)
	if err != nil {
		l.w.setState(false, err)
		return nil, err
	}
	n := l.w.opened()
	return newTrackedWatch(inner, func() { l.w.ended(n) }), nil
}

// List and Watch without a context are the older ListerWatcher interface.
func (l *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *listWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported keeps the reflector on LIST then WATCH
// instead of a streaming list (a watch with sendInitialEvents), which API
// servers before 1.34 may not serve: the same requests, and so the same
// RBAC (list and watch), against every host cluster version.
func (l *listWatch) IsWatchListSemanticsUnSupported() bool { return true }

// trackedWatch passes a watch's events on and calls closed when it ends,
// which is when the cache stops following the server.
type trackedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func newTrackedWatch(inner watch.Interface, closed func()) *trackedWatch {
	t := &trackedWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(t.out)
		defer closed()
		for {
			select {
			case ev, ok := <-inner.ResultChan():
				if !ok {
					return
				}
				select {
				case t.out <- ev:
				case <-t.stop:
					return
				}
			case <-t.stop:
				return
			}
		}
	}()
	return t
}

func (t *trackedWatch) ResultChan() <-chan watch.Event { return t.out }

func (t *trackedWatch) Stop() {
	t.once.Do(func() { close(t.stop); t.inner.Stop() })
}

// stripManagedFields drops what no cached read uses; managed fields are
// most of a small object's size.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// caches returns the started caches, starting them on first use and
// waiting until their initial lists are in (or one of them failed).
func (c *Client) caches(ctx context.Context) (*hostCaches, error) {
	c.cacheMu.Lock()
	if c.cache == nil {
		if c.closed {
			c.cacheMu.Unlock()
			return nil, errors.New("hostcluster: client closed")
		}
		hc, err := c.startCaches()
		if err != nil {
			c.cacheMu.Unlock()
			return nil, err
		}
		c.cache = hc
	}
	hc := c.cache
	c.cacheMu.Unlock()
	return hc, nil
}

// startCaches builds and starts every watch. The watches' requests run
// without the client's request timeout (a watch is a long request, ended
// by the server after a few minutes) and bypass nothing else: the rate
// limit and the tracing transport still apply.
func (c *Client) startCaches() (*hostCaches, error) {
	rc := rest.CopyConfig(c.config)
	rc.Timeout = 0
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	hc := &hostCaches{byGVR: map[schema.GroupVersionResource]*watched{}, repair: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	hc.cancel = cancel
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}

	add := func(w *watched, lw *listWatch, example runtime.Object) {
		lw.w, w.lw = w, lw
		w.informer = cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{Indexers: indexers, ObjectDescription: w.what})
		_ = w.informer.SetTransform(stripManagedFields)
		_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { w.observed(obj) }, UpdateFunc: func(_, obj any) { w.observed(obj) }, DeleteFunc: w.observed,
		})
		_ = w.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			w.setState(false, err)
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
	metaOnly := func(gvr schema.GroupVersionResource, selector string) *watched {
		w := newWatched(gvr.Resource)
		add(w, &listWatch{selector: selector,
			list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return md.Resource(gvr).List(ctx, o)
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return md.Resource(gvr).Watch(ctx, o)
			}}, &metav1.PartialObjectMetadata{})
		return w
	}
	full := func(gvr schema.GroupVersionResource, selector string) *watched {
		w := newWatched(gvr.Resource)
		add(w, &listWatch{selector: selector,
			list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return dyn.Resource(gvr).List(ctx, o)
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return dyn.Resource(gvr).Watch(ctx, o)
			}}, &unstructured.Unstructured{})
		return w
	}
	hc.byGVR[namespacesGVR] = metaOnly(namespacesGVR, selectManaged)
	hc.byGVR[QueueGVR] = full(QueueGVR, selectManaged)
	// Every admission kind, whether the server serves it or not: knowing
	// takes discovery, which must not run here (under cacheMu; in an outage
	// it failed every start of the caches, and the host outage test's
	// recovery with it). On a server without MutatingAdmissionPolicy its
	// two watches keep failing and nothing reads them: reads go through
	// guardrailKinds(MutatingAdmissionPolicySupported()).
	for _, kind := range guardrailKinds(true) {
		if kind == vapKind {
			hc.byGVR[admissionGVR(kind)] = full(admissionGVR(kind), selectManaged) // status: type-check warnings
		} else {
			hc.byGVR[admissionGVR(kind)] = metaOnly(admissionGVR(kind), selectManaged)
		}
		_, _ = hc.byGVR[admissionGVR(kind)].informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, obj any) { c.sharedGuardrailChanged(hc, kind, obj, false) },
			DeleteFunc: func(obj any) { c.sharedGuardrailChanged(hc, kind, obj, true) },
		})
	}
	hc.done.Add(1)
	go func() { defer hc.done.Done(); c.repairSharedGuardrails(ctx, hc) }()
	hc.byGVR[networkPoliciesGVR] = metaOnly(networkPoliciesGVR, selectManaged)
	hc.byGVR[secretsGVR] = metaOnly(secretsGVR, selectReleases)
	hc.kubeconfigs = metaOnly(secretsGVR, selectKubeconfigs)
	hc.kubeconfigs.what = "kubeconfig secrets"

	sts := newWatched("statefulsets")
	add(sts, &listWatch{selector: selectVCluster,
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kube.AppsV1().StatefulSets("").List(ctx, o)
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kube.AppsV1().StatefulSets("").Watch(ctx, o)
		}}, &appsv1.StatefulSet{})
	hc.byGVR[statefulSetsGVR] = sts
	svc := newWatched("services")
	add(svc, &listWatch{selector: selectVCluster,
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kube.CoreV1().Services("").List(ctx, o)
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kube.CoreV1().Services("").Watch(ctx, o)
		}}, &corev1.Service{})
	hc.byGVR[servicesGVR] = svc

	for _, w := range hc.all() {
		hc.done.Add(1)
		go func() { defer hc.done.Done(); w.informer.RunWithContext(ctx) }()
	}
	return hc, nil
}

func (hc *hostCaches) all() []*watched {
	out := []*watched{hc.kubeconfigs}
	for _, w := range hc.byGVR {
		out = append(out, w)
	}
	return out
}

// Close stops the Client's watches. A closed Client must not be used.
func (c *Client) Close() {
	c.cacheMu.Lock()
	hc := c.cache
	c.cache, c.closed = nil, true
	c.cacheMu.Unlock()
	if hc != nil {
		hc.cancel()
		hc.done.Wait()
	}
}

// restartCachesIfCutOff drops watch caches that lost the API server (a
// list or watch of theirs failed unreachable) now that it answers again:
// the next read starts them afresh and lists at once, where their
// reflectors would wait out a backoff of up to a minute first (the worker
// would keep the host's virtual clusters waiting as long). The probe of
// the host cluster calls it once it reached the API server.
func (c *Client) restartCachesIfCutOff() {
	c.cacheMu.Lock()
	hc := c.cache
	if hc == nil || !hc.cutOff() {
		c.cacheMu.Unlock()
		return
	}
	c.cache = nil
	c.cacheMu.Unlock()
	// Stopped without waiting: a watch request still hanging on a dead
	// connection would hold up the probe, and with it the news that the
	// host cluster is back.
	hc.cancel()
}

// cutOff reports whether a watch's last list or watch failed unreachable.
func (hc *hostCaches) cutOff() bool {
	for _, w := range hc.all() {
		w.mu.Lock()
		err := w.err
		w.mu.Unlock()
		if err != nil && Unreachable(err) {
			return true
		}
	}
	return false
}

// ready waits until w follows the server: its initial list is in and a
// watch is open. It fails at once with a list or watch error (a missing
// permission, an unreachable server), and after reconnectWait (or
// cacheSyncTimeout for the initial list) with context.DeadlineExceeded.
func (w *watched) ready(ctx context.Context) error {
	limit := reconnectWait
	if !w.informer.HasSynced() {
		limit = cacheSyncTimeout
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	// The informer closes its synced channel from a goroutine of its own,
	// after the last event of the initial list was handed out: the last
	// signal (that event, or the watch opening) can come before it. Without
	// waiting for the channel as well, a read that saw the watch open a
	// moment before the informer called itself synced slept until the
	// deadline whenever nothing else changed (an empty list, say).
	synced := w.informer.HasSyncedChecker().Done()
	for {
		w.mu.Lock()
		isSynced := w.informer.HasSynced()
		ok, err, changed := w.watching && isSynced, w.err, w.changed
		w.mu.Unlock()
		switch {
		case ok:
			return nil
		case err != nil:
			return fmt.Errorf("hostcluster: watch of %s: %w", w.what, err)
		}
		var syncing <-chan struct{}
		if !isSynced {
			syncing = synced
		}
		select {
		case <-changed:
		case <-syncing:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("hostcluster: watch of %s not open after %s: %w", w.what, limit, context.DeadlineExceeded)
		}
	}
}

// get reads ns/name from w once it follows the server and holds any
// version this Client wrote of it. A write whose event does not arrive
// within writeWait (the object was deleted since, say) is given up on: the
// cache's answer stands.
func (w *watched) get(ctx context.Context, namespace, name string) (any, bool, error) {
	if err := w.ready(ctx); err != nil {
		return nil, false, err
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	deadline := time.NewTimer(writeWait)
	defer deadline.Stop()
	for {
		obj, exists, err := w.informer.GetIndexer().GetByKey(key)
		if err != nil {
			return nil, false, err
		}
		w.mu.Lock()
		want, pending := w.written[key]
		changed := w.changed
		if pending && exists {
			if m, err := metaOf(obj); err != nil || atLeast(m.GetResourceVersion(), want) {
				delete(w.written, key)
				pending = false
			}
		}
		w.mu.Unlock()
		if !pending {
			return obj, exists, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-deadline.C:
			w.mu.Lock()
			delete(w.written, key)
			w.mu.Unlock()
			return obj, exists, nil
		}
	}
}

// inNamespace lists what w holds in namespace, once w follows the server
// and any write of this Client there has arrived (or writeWait passed:
// those writes are given up on).
func (w *watched) inNamespace(ctx context.Context, namespace string) ([]any, error) {
	if err := w.ready(ctx); err != nil {
		return nil, err
	}
	deadline := time.NewTimer(writeWait)
	defer deadline.Stop()
	prefix := namespace + "/"
	for {
		w.mu.Lock()
		pending := false
		for key, want := range w.written {
			if !strings.HasPrefix(key, prefix) {
				continue
			}
			if obj, exists, _ := w.informer.GetIndexer().GetByKey(key); exists {
				if m, err := metaOf(obj); err != nil || atLeast(m.GetResourceVersion(), want) {
					delete(w.written, key)
					continue
				}
			}
			pending = true
		}
		changed := w.changed
		w.mu.Unlock()
		if !pending {
			return w.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			// Given up on, as get does: a write the watch never shows
			// (deleted since, or outside its selector) must not hold up
			// every later read of the namespace.
			w.mu.Lock()
			for key := range w.written {
				if strings.HasPrefix(key, prefix) {
					delete(w.written, key)
				}
			}
			w.mu.Unlock()
			return w.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
		}
	}
}

// remember records a write of obj, unless the cache already holds it (its
// event came first).
func (w *watched) remember(obj metav1.Object) {
	key := obj.GetName()
	if obj.GetNamespace() != "" {
		key = obj.GetNamespace() + "/" + key
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if have, exists, _ := w.informer.GetIndexer().GetByKey(key); exists {
		if m, err := metaOf(have); err == nil && atLeast(m.GetResourceVersion(), obj.GetResourceVersion()) {
			return
		}
	}
	w.written[key] = obj.GetResourceVersion()
}

// wrote records an object this Client wrote, so that its reads wait for it
// (a no-op before the caches start: their initial list comes after it).
func (c *Client) wrote(gvr schema.GroupVersionResource, obj metav1.Object) {
	c.cacheMu.Lock()
	hc := c.cache
	c.cacheMu.Unlock()
	if hc == nil || obj == nil {
		return
	}
	if w := hc.byGVR[gvr]; w != nil {
		w.remember(obj)
	}
}

// cached is the watch of gvr, ready to read.
func (c *Client) cached(ctx context.Context, gvr schema.GroupVersionResource) (*watched, error) {
	hc, err := c.caches(ctx)
	if err != nil {
		return nil, err
	}
	w := hc.byGVR[gvr]
	if w == nil {
		return nil, fmt.Errorf("hostcluster: no watch of %s", gvr.Resource)
	}
	return w, nil
}

// getCached reads one object of gvr from its watch.
func (c *Client) getCached(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (any, bool, error) {
	w, err := c.cached(ctx, gvr)
	if err != nil {
		return nil, false, err
	}
	return w.get(ctx, namespace, name)
}

// Sync waits until the Client's watch caches hold what the API server
// holds now: each watched resource is listed once, and the wait ends when
// the cache has every listed object at its listed version or later, and
// nothing the list no longer shows from before it. It is for tests and
// tools that change the host cluster behind the Client's back and then
// need the next Observe to see the change at once; the worker never needs
// it (its own writes are waited for, and a change by others is seen a
// moment later, long before the next resync). Before the caches start it
// does nothing: their first list is then current.
func (c *Client) Sync(ctx context.Context) error {
	c.cacheMu.Lock()
	hc := c.cache
	c.cacheMu.Unlock()
	if hc == nil {
		return nil
	}
	mutating, err := c.MutatingAdmissionPolicySupported()
	if err != nil {
		return err
	}
	// The watches of kinds the server does not serve keep failing; nothing
	// reads them, so there is nothing to catch up with.
	unserved := map[*watched]bool{}
	if !mutating {
		unserved[hc.byGVR[admissionGVR(mapKind)]] = true
		unserved[hc.byGVR[admissionGVR(mapbKind)]] = true
	}
	for _, w := range hc.all() {
		if unserved[w] {
			continue
		}
		if err := w.syncNow(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (w *watched) syncNow(ctx context.Context) error {
	if err := w.ready(ctx); err != nil {
		return err
	}
	list, err := w.lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			return err
		}
		key := m.GetName()
		if m.GetNamespace() != "" {
			key = m.GetNamespace() + "/" + key
		}
		want[key] = m.GetResourceVersion()
	}
	deadline := time.NewTimer(cacheSyncTimeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		changed := w.changed
		w.mu.Unlock()
		behind := ""
		for key, rv := range want {
			obj, exists, _ := w.informer.GetIndexer().GetByKey(key)
			if !exists {
				behind = key + " missing"
				break
			}
			if m, err := metaOf(obj); err == nil && !atLeast(m.GetResourceVersion(), rv) {
				behind = key + " older"
				break
			}
		}
		if behind == "" {
			for _, obj := range w.informer.GetIndexer().List() {
				m, err := metaOf(obj)
				if err != nil {
					continue
				}
				key, _ := cache.MetaNamespaceKeyFunc(obj)
				if _, listed := want[key]; !listed && !atLeast(m.GetResourceVersion(), listMeta.GetResourceVersion()) {
					behind = key + " deleted"
					break
				}
			}
		}
		if behind == "" {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("hostcluster: watch of %s not in sync after %s (%s)", w.what, cacheSyncTimeout, behind)
		}
	}
}

// sharedGuardrailChanged is the admission watches' extra handler: one
// shared program guards every virtual cluster on the host, so when one of
// its objects that this Client applied is deleted or its spec changed by
// someone else, it is re-applied at once (repairSharedGuardrails) rather
// than by the next reconcile that happens to look. Each virtual cluster's
// next Apply then probes it again (the probed combination names the
// objects' UIDs and generations).
func (c *Client) sharedGuardrailChanged(hc *hostCaches, kind string, obj any, deleted bool) {
	m, err := metaOf(obj)
	if err != nil || m.GetName() != GuardrailsPolicyName {
		return
	}
	c.guardMu.Lock()
	applied, ok := c.guardApplied[policyVersionKey(kind)]
	c.guardMu.Unlock()
	if !ok || (!deleted && applied == specVersion(m.GetUID(), m.GetGeneration())) {
		return // not applied by this Client, or its own write
	}
	select {
	case hc.repair <- struct{}{}:
	default: // one is pending already
	}
}

// repairSharedGuardrails re-applies the shared guardrails when signalled,
// retrying with growing delays while that fails, until ctx ends.
func (c *Client) repairSharedGuardrails(ctx context.Context, hc *hostCaches) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hc.repair:
		}
		for delay := time.Second; ctx.Err() == nil; delay = min(2*delay, 30*time.Second) {
			mutating, err := c.MutatingAdmissionPolicySupported()
			if err == nil {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err = c.ensureSharedGuardrails(rctx, mutating)
				cancel()
			}
			if err == nil {
				c.log.Warn("re-applied the shared admission guardrails, which were deleted or changed on the host cluster", "policy", GuardrailsPolicyName)
				break
			}
			c.log.Warn("re-applying the shared admission guardrails failed; retrying", "policy", GuardrailsPolicyName, "error", err, "retry_in", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}
}
