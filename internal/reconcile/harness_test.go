package reconcile_test

// Test harness for the worker on a real kube-apiserver (envtest) and a real
// PostgreSQL database, with requests made and approved through the real API
// server (apptest). Every test function starts its own API server, so names
// never collide with another test's objects (envtest has no namespace
// controller: deleted namespaces stay Terminating for good).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashWorkerEnv); spec != "" {
		os.Exit(runCrashWorker(spec)) // a worker process of TestWorkerProcessKilled
	}
	ctrllog.SetLogger(logr.Discard()) // envtest logs through controller-runtime
	// client-go reports the killed workers' broken connections through klog.
	klog.SetLogger(logr.Discard())
	storetest.Main(m)
}

const gi = int64(1) << 30

// Demo data (devenv.Seed): department research (budget 8 GPU, 128 CPU,
// 1024Gi) with team-a (SHARED, 4 GPU, 32 CPU, 256Gi, owner bob) and team-b
// (DEDICATED, 2 GPU, 32 CPU, 256Gi, owner dan).
const (
	deptQueue  = "dept-research"
	teamAQueue = "team-research-team-a"
	teamBQueue = "team-research-team-b"
)

var owners = map[string]string{"team-a": "bob", "team-b": "dan"}

type harness struct {
	t    testing.TB
	ctx  context.Context
	api  *envtestenv.Env
	rc   *rest.Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
	env  *apptest.Env
	pool *pgxpool.Pool
	log  *slog.Logger
	// charts are the vCluster chart directories (Go module cache) by version.
	charts map[string]string
}

type harnessOptions struct {
	// appWorker runs the server's own worker (cfg.RunWorker), as
	// `gpuplane serve --run-worker` does; otherwise tests run their own.
	appWorker bool
	// fleet: capacity is what the worker observes on the host clusters
	// (no static capacity), and the demo data is left to the test, which
	// must observe the host clusters first.
	fleet bool
}

// newHarness starts a real API server and the real gpuplane server on a
// fresh database. It fails, never skips, when the envtest binaries are
// missing.
func newHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	envtestenv.SkipIfShort(t)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, err := envtestenv.Start(sctx, envtestenv.Options{})
	if err != nil {
		t.Fatalf("real API server needed: %v", err)
	}
	t.Cleanup(func() {
		if err := api.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	charts, err := vclusterchart.Dirs(sctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancelCtx := context.WithCancel(context.Background())
	t.Cleanup(cancelCtx)
	rc := api.RESTConfig()
	rc.QPS, rc.Burst = 200, 400
	h := &harness{
		t: t, ctx: ctx, api: api, rc: rc, charts: charts,
		kube: kubernetes.NewForConfigOrDie(rc), dyn: dynamic.NewForConfigOrDie(rc),
		log: testLogger(t, slog.LevelWarn),
	}
	h.env = apptest.Start(t, apptest.Options{Seed: !o.fleet, ObservedCapacity: o.fleet,
		HostConfig: api.RESTConfig(), RunWorker: o.appWorker})
	h.pool = h.env.App.Pool()
	return h
}

// testLogger logs to t until the test ends, then drops records: Helm and
// worker goroutines of a "crashed" worker may outlive a subtest.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() { w.mu.Lock(); w.closed = true; w.mu.Unlock() }

// newHost builds a host-cluster client as a worker process would (same
// settings as the server's, and the production rate limit and request
// timeout: app.Defaults through app.TuneHostConfig). dial, when set,
// carries every connection.
func (h *harness) newHost(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *hostcluster.Client {
	h.t.Helper()
	rc := rest.CopyConfig(h.rc)
	app.TuneHostConfig(app.Defaults())(rc)
	rc.Dial = dial
	c, err := hostcluster.New(rc, hostcluster.Options{Settings: hostcluster.Settings{Chart: hostcluster.ChartSource{Dirs: h.charts}}})
	if err != nil {
		h.t.Fatal(err)
	}
	// Its watches end before the API server stops (which otherwise waits
	// for them to drain).
	h.t.Cleanup(c.Close)
	return c
}

// workerConfig is a test worker: short poll, lease and backoff.
func workerConfig(id string) reconcile.Config {
	return reconcile.Config{ID: id, Concurrency: 4, Lease: 10 * time.Second, Poll: 50 * time.Millisecond,
		Resync: time.Hour, MaxAttempts: 5, BackoffBase: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
}

func (h *harness) worker(host reconcile.Host, cfg reconcile.Config) *reconcile.Worker {
	if host == nil {
		host = h.newHost(nil)
	}
	return reconcile.New(store.New(h.pool), host, h.log, cfg)
}

// runOnce processes everything due now.
func (h *harness) runOnce(t testing.TB, w *reconcile.Worker) {
	t.Helper()
	if _, err := w.RunOnce(h.ctx); err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
}

// start runs w until the returned stop is called (or the test ends).
func (h *harness) start(t testing.TB, w *reconcile.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// simulate plays kubelet and vCluster for every control plane (devenv's
// dev-mode simulator) until the returned stop is called.
func (h *harness) simulate(t testing.TB) (stop func()) {
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		devenv.SimulateControlPlanes(ctx, h.rc, 50*time.Millisecond, func(string, ...any) {})
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// ---------------------------------------------------------------- requests

func vcSpec(gpu string, cpuMillis, mem int64) *pb.VirtualClusterSpec {
	return &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: gpu, CpuMillis: cpuMillis, MemoryBytes: mem}}
}

// submit creates a request as the team's owner and approves it as alice
// (platform admin), through the real gRPC API.
func (h *harness) submit(t testing.TB, team string, r *pb.Request) *pb.Request {
	t.Helper()
	r.Team = "teams/" + team
	if r.Justification == "" {
		r.Justification = "test"
	}
	created, err := h.env.Requests.CreateRequest(h.env.As(t, owners[team]), &pb.CreateRequestRequest{Request: r})
	if err != nil {
		t.Fatalf("CreateRequest for %s: %v", team, err)
	}
	approved, err := h.env.Requests.ApproveRequest(h.env.As(t, "alice"), &pb.ApproveRequestRequest{Name: created.GetName()})
	if err != nil {
		t.Fatalf("ApproveRequest %s: %v", created.GetName(), err)
	}
	if approved.GetState() != pb.Request_APPROVED {
		t.Fatalf("request %s is %s after approval", approved.GetName(), approved.GetState())
	}
	return approved
}

func (h *harness) createVC(t testing.TB, team, id string, spec *pb.VirtualClusterSpec) *pb.Request {
	t.Helper()
	return h.submit(t, team, &pb.Request{Payload: &pb.Request_CreateVirtualCluster{
		CreateVirtualCluster: &pb.CreateVirtualClusterPayload{VirtualClusterId: id, Spec: spec}}})
}

func (h *harness) changeQuota(t testing.TB, team, id string, q *pb.Quota) *pb.Request {
	t.Helper()
	return h.submit(t, team, &pb.Request{Payload: &pb.Request_ChangeVirtualClusterQuota{
		ChangeVirtualClusterQuota: &pb.ChangeVirtualClusterQuotaPayload{
			VirtualCluster: "teams/" + team + "/virtualClusters/" + id, Quota: q}}})
}

func (h *harness) deleteVC(t testing.TB, team, id string) *pb.Request {
	t.Helper()
	return h.submit(t, team, &pb.Request{Payload: &pb.Request_DeleteVirtualCluster{
		DeleteVirtualCluster: &pb.DeleteVirtualClusterPayload{VirtualCluster: "teams/" + team + "/virtualClusters/" + id}}})
}

func (h *harness) request(t testing.TB, name string) *pb.Request {
	t.Helper()
	r, err := h.env.Requests.GetRequest(h.env.As(t, "alice"), &pb.GetRequestRequest{Name: name})
	if err != nil {
		t.Fatalf("GetRequest %s: %v", name, err)
	}
	return r
}

func (h *harness) wantRequest(t testing.TB, name string, want pb.Request_State) *pb.Request {
	t.Helper()
	r := h.request(t, name)
	if r.GetState() != want {
		t.Errorf("request %s (%s) is %s, want %s (failure: %q)", name, r.GetKind(), r.GetState(), want, r.GetFailureMessage())
	}
	return r
}

// vc reads a virtual cluster through the API.
func (h *harness) vc(t testing.TB, id string) *pb.VirtualCluster {
	t.Helper()
	row, err := virtualcluster.Get(h.ctx, h.pool, id, false)
	if err != nil {
		t.Fatalf("virtual cluster %s: %v", id, err)
	}
	out, err := h.env.VirtualCluster.GetVirtualCluster(h.env.As(t, "alice"),
		&pb.GetVirtualClusterRequest{Name: "teams/" + row.Team + "/virtualClusters/" + id})
	if err != nil {
		t.Fatalf("GetVirtualCluster %s: %v", id, err)
	}
	return out
}

func describe(v *pb.VirtualCluster) string {
	var b strings.Builder
	st := v.GetStatus()
	fmt.Fprintf(&b, "%s: phase %s, generation %d, observed %d, message %q", v.GetName(), st.GetPhase(), v.GetGeneration(),
		st.GetObservedGeneration(), st.GetMessage())
	for _, c := range st.GetConditions() {
		fmt.Fprintf(&b, "\n    %s=%s (%s) %s [gen %d]", c.GetType(), c.GetStatus(), c.GetReason(), c.GetMessage(), c.GetObservedGeneration())
	}
	return b.String()
}

func condition(v *pb.VirtualCluster, typ string) *pb.Condition {
	for _, c := range v.GetStatus().GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func condTrue(v *pb.VirtualCluster, typ string) bool {
	c := condition(v, typ)
	return c != nil && c.GetStatus() == pb.Condition_TRUE
}

// applied: the host reflects the current generation (the benchmark's and
// several tests' "done" condition).
func applied(v *pb.VirtualCluster) bool {
	return v.GetStatus().GetObservedGeneration() == v.GetGeneration() &&
		condTrue(v, reconcile.CondRelease) && condTrue(v, reconcile.CondQueues)
}

func inPhase(p pb.VirtualClusterStatus_Phase) func(*pb.VirtualCluster) bool {
	return func(v *pb.VirtualCluster) bool { return v.GetStatus().GetPhase() == p }
}

func readyAt(v *pb.VirtualCluster) bool {
	return v.GetStatus().GetPhase() == pb.VirtualClusterStatus_READY && v.GetStatus().GetObservedGeneration() == v.GetGeneration()
}

// waitVC polls the API until cond holds for the virtual cluster.
func (h *harness) waitVC(t testing.TB, id string, timeout time.Duration, what string, cond func(*pb.VirtualCluster) bool) *pb.VirtualCluster {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := h.vc(t, id)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("virtual cluster %s not %s after %s:\n  %s\n  work queue: %s", id, what, timeout, describe(v), h.workRow(t, id))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// workRow describes the reconcile_work row of a virtual cluster.
func (h *harness) workRow(t testing.TB, id string) string {
	var attempts int
	var owner, lastErr string
	var expire *time.Time
	err := h.pool.QueryRow(h.ctx, `SELECT attempts, lease_owner, lease_expire_time, last_error FROM reconcile_work WHERE virtual_cluster_id = $1`, id).
		Scan(&attempts, &owner, &expire, &lastErr)
	if err != nil {
		return fmt.Sprintf("(no row: %v)", err)
	}
	return fmt.Sprintf("attempts %d, lease %q until %v, last error %q", attempts, owner, expire, lastErr)
}

// waitIdle waits until the work queue is empty: a change that arrived
// during a reconcile leaves its row for one more (no-op) pass.
func (h *harness) waitIdle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.queued(t) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("work queue not drained: %d items", h.queued(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) queued(t testing.TB) int {
	t.Helper()
	var n int
	if err := h.pool.QueryRow(h.ctx, `SELECT count(*) FROM reconcile_work`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// auditEvents lists events of an action on a resource through the API.
func (h *harness) auditEvents(t testing.TB, resource, action string) []*pb.AuditEvent {
	t.Helper()
	out, err := h.env.Audit.ListAuditEvents(h.env.As(t, "alice"), &pb.ListAuditEventsRequest{PageSize: 100,
		Filter: fmt.Sprintf(`resource = %q AND action = %q`, resource, action)})
	if err != nil {
		t.Fatalf("ListAuditEvents: %v", err)
	}
	return out.GetAuditEvents()
}

// ---------------------------------------------------------------- host cluster

func (h *harness) queue(t testing.TB, name string) *unstructured.Unstructured {
	t.Helper()
	q, err := h.dyn.Resource(hostcluster.QueueGVR).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("queue %s: %v", name, err)
	}
	return q
}

func number(t testing.TB, obj *unstructured.Unstructured, path ...string) float64 {
	t.Helper()
	v, found, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
	if !found || err != nil {
		t.Fatalf("%s: %s not set (%v)", obj.GetName(), strings.Join(path, "."), err)
	}
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	}
	t.Fatalf("%s: %s is %T", obj.GetName(), strings.Join(path, "."), v)
	return 0
}

// markReady plays kubelet and vCluster for one control plane.
func (h *harness) markReady(t testing.TB, id string) {
	t.Helper()
	sts, err := h.kube.AppsV1().StatefulSets(hostcluster.NamespaceName(id)).Get(h.ctx, hostcluster.ReleaseName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("control plane StatefulSet of %s: %v", id, err)
	}
	if err := devenv.MarkControlPlaneReady(h.ctx, h.kube, sts); err != nil {
		t.Fatal(err)
	}
}

// markQuotaObserved plays kube-controller-manager's part for the
// ResourceQuota the vCluster chart creates: without a status the quota
// admission plugin refuses every pod.
func (h *harness) markQuotaObserved(t testing.TB, id string) {
	t.Helper()
	ns := hostcluster.NamespaceName(id)
	rq, err := h.kube.CoreV1().ResourceQuotas(ns).Get(h.ctx, hostcluster.KubeconfigSecretName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the vCluster chart should have created a ResourceQuota: %v", err)
	}
	rq.Status.Hard = rq.Spec.Hard
	rq.Status.Used = corev1.ResourceList{}
	for k := range rq.Spec.Hard {
		rq.Status.Used[k] = resource.MustParse("0")
	}
	if _, err := h.kube.CoreV1().ResourceQuotas(ns).UpdateStatus(h.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

var (
	vapGVR     = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	vapbGVR    = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
	mapGVR     = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
	mapbGVR    = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"}
	nsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	policyGVRs = []schema.GroupVersionResource{vapGVR, vapbGVR, mapGVR, mapbGVR}
	// namespacedGVRs: every namespaced kind Apply or the chart creates.
	namespacedGVRs = []schema.GroupVersionResource{
		{Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "services"}, {Version: "v1", Resource: "serviceaccounts"},
		{Version: "v1", Resource: "resourcequotas"}, {Version: "v1", Resource: "limitranges"},
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "persistentvolumeclaims"},
		{Group: "apps", Version: "v1", Resource: "statefulsets"}, {Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
		{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
	}
)

func (h *harness) list(t testing.TB, gvr schema.GroupVersionResource, ns, selector string) []unstructured.Unstructured {
	t.Helper()
	var l *unstructured.UnstructuredList
	var err error
	if ns == "" {
		l, err = h.dyn.Resource(gvr).List(h.ctx, metav1.ListOptions{LabelSelector: selector})
	} else {
		l, err = h.dyn.Resource(gvr).Namespace(ns).List(h.ctx, metav1.ListOptions{LabelSelector: selector})
	}
	if err != nil {
		t.Fatalf("list %s: %v", gvr.Resource, err)
	}
	return l.Items
}

func names(items []unstructured.Unstructured) []string {
	var out []string
	for _, o := range items {
		out = append(out, o.GetName())
	}
	slices.Sort(out)
	return out
}

// releases returns the Helm release records of a virtual cluster as
// "<secret name>=<status>".
func (h *harness) releases(t testing.TB, id string) []string {
	t.Helper()
	var out []string
	for _, s := range h.list(t, schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, hostcluster.NamespaceName(id), "owner=helm,name="+hostcluster.ReleaseName(id)) {
		out = append(out, s.GetName()+"="+s.GetLabels()["status"])
	}
	slices.Sort(out)
	return out
}

// assertPresent checks that exactly one of everything the worker creates
// exists for a live virtual cluster: one namespace, the three queues in a
// chain, the admission policies and bindings, the network policy, one
// control plane and one Helm release, deployed, with no pending or failed
// revision.
func (h *harness) assertPresent(t testing.TB, id, team string) {
	t.Helper()
	ns := hostcluster.NamespaceName(id)
	sel := hostcluster.LabelVirtualCluster + "=" + id
	nss := h.list(t, nsGVR, "", sel)
	if len(nss) != 1 || nss[0].GetName() != ns || nss[0].GetDeletionTimestamp() != nil {
		t.Errorf("%s: namespaces %v (want exactly %s, not terminating)", id, names(nss), ns)
	}
	leaves := h.list(t, hostcluster.QueueGVR, "", sel)
	if got := names(leaves); !slices.Equal(got, []string{hostcluster.LeafQueueName(id)}) {
		t.Errorf("%s: leaf queues %v", id, got)
	}
	teamQ := hostcluster.TeamQueueName("research", team)
	for name, parent := range map[string]string{hostcluster.LeafQueueName(id): teamQ, teamQ: deptQueue, deptQueue: ""} {
		q, err := h.dyn.Resource(hostcluster.QueueGVR).Get(h.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: queue %s: %v", id, name, err)
			continue
		}
		if got, _, _ := unstructured.NestedString(q.Object, "spec", "parentQueue"); got != parent {
			t.Errorf("%s: queue %s has parent %q, want %q", id, name, got, parent)
		}
	}
	// Guarded by the shared admission policies (no objects of its own), with
	// its parameters on its namespace.
	for _, gvr := range policyGVRs {
		if got := names(h.list(t, gvr, "", sel)); len(got) > 0 {
			t.Errorf("%s: %s of its own %v", id, gvr.Resource, got)
		}
		if _, err := h.dyn.Resource(gvr).Get(h.ctx, hostcluster.GuardrailsPolicyName, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: shared %s: %v", id, gvr.Resource, err)
		}
	}
	if len(nss) == 1 && nss[0].GetLabels()[hostcluster.GuardrailsLabel] != hostcluster.GuardrailsVersion {
		t.Errorf("%s: namespace not bound to the guardrails: %v", id, nss[0].GetLabels())
	}
	nps := h.list(t, schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}, ns, "")
	if got := names(nps); !slices.Equal(got, []string{hostcluster.NetworkPolicyName}) {
		t.Errorf("%s: network policies %v", id, got)
	}
	sts := h.list(t, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, ns, "")
	if got := names(sts); !slices.Equal(got, []string{hostcluster.ReleaseName(id)}) {
		t.Errorf("%s: statefulsets %v", id, got)
	}
	deployed := 0
	rels := h.releases(t, id)
	for _, r := range rels {
		_, status, _ := strings.Cut(r, "=")
		switch status {
		case "deployed":
			deployed++
		case "superseded":
		default:
			t.Errorf("%s: Helm release record %s", id, r)
		}
	}
	if deployed != 1 {
		t.Errorf("%s: Helm release records %v, want exactly one deployed", id, rels)
	}
}

// assertGone checks that nothing the worker or the chart created is left for
// a deleted virtual cluster. The namespace may remain Terminating: envtest
// has no namespace controller.
func (h *harness) assertGone(t testing.TB, id string) {
	t.Helper()
	ns := hostcluster.NamespaceName(id)
	n, err := h.kube.CoreV1().Namespaces().Get(h.ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	case n.DeletionTimestamp == nil:
		t.Errorf("%s: namespace %s not being deleted", id, ns)
	}
	sel := hostcluster.LabelVirtualCluster + "=" + id
	if _, err := h.dyn.Resource(hostcluster.QueueGVR).Get(h.ctx, hostcluster.LeafQueueName(id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s: leaf queue still there (%v)", id, err)
	}
	if got := names(h.list(t, hostcluster.QueueGVR, "", sel)); len(got) > 0 {
		t.Errorf("%s: queues left %v", id, got)
	}
	for _, gvr := range policyGVRs {
		if _, err := h.dyn.Resource(gvr).Get(h.ctx, hostcluster.PolicyName(id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: %s still there (%v)", id, gvr.Resource, err)
		}
	}
	for _, gvr := range namespacedGVRs {
		got := names(h.list(t, gvr, ns, ""))
		if gvr.Resource == "secrets" {
			// The kubeconfig Secret is written by vCluster itself (here by
			// the control-plane simulator), not by the chart or the worker;
			// the namespace controller removes it with the namespace.
			got = slices.DeleteFunc(got, func(n string) bool { return n == hostcluster.KubeconfigSecretName(id) })
		}
		if len(got) > 0 {
			t.Errorf("%s: %s left in %s: %v", id, gvr.Resource, ns, got)
		}
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	} {
		if got := names(h.list(t, gvr, "", "release="+hostcluster.ReleaseName(id))); len(got) > 0 {
			t.Errorf("%s: %s left: %v", id, gvr.Resource, got)
		}
	}
}

// assertNoOrphans checks every gpuplane object on the host against the
// database: each belongs to a live virtual cluster (or, for parent queues,
// to a team or department that still has one), and each Helm release is in
// a live virtual cluster's namespace.
func (h *harness) assertNoOrphans(t testing.TB) {
	t.Helper()
	live := map[string]string{} // vc -> team
	rows, err := h.pool.Query(h.ctx, `SELECT id, team_id FROM virtual_clusters WHERE phase IN ('PROVISIONING', 'READY', 'DEGRADED', 'FAILED', 'DELETING')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, team string
		if err := rows.Scan(&id, &team); err != nil {
			t.Fatal(err)
		}
		live[id] = team
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	liveTeams := map[string]bool{}
	for _, team := range live {
		liveTeams[hostcluster.TeamQueueName("research", team)] = true
	}
	managed := hostcluster.LabelManagedBy + "=" + hostcluster.ManagedByValue
	for _, q := range h.list(t, hostcluster.QueueGVR, "", managed) {
		switch q.GetLabels()[hostcluster.LabelQueueLevel] {
		case hostcluster.LevelLeaf:
			if _, ok := live[q.GetLabels()[hostcluster.LabelVirtualCluster]]; !ok {
				t.Errorf("orphan leaf queue %s", q.GetName())
			}
		case hostcluster.LevelTeam:
			if !liveTeams[q.GetName()] {
				t.Errorf("orphan team queue %s", q.GetName())
			}
		case hostcluster.LevelDepartment:
			if len(live) == 0 {
				t.Errorf("orphan department queue %s", q.GetName())
			}
		}
	}
	for _, gvr := range policyGVRs {
		for _, p := range h.list(t, gvr, "", managed) {
			if p.GetName() == hostcluster.GuardrailsPolicyName {
				continue // shared by every virtual cluster on the host
			}
			if _, ok := live[p.GetLabels()[hostcluster.LabelVirtualCluster]]; !ok {
				t.Errorf("orphan %s %s", gvr.Resource, p.GetName())
			}
		}
	}
	for _, n := range h.list(t, nsGVR, "", managed) {
		if _, ok := live[n.GetLabels()[hostcluster.LabelVirtualCluster]]; !ok && n.GetDeletionTimestamp() == nil {
			t.Errorf("orphan namespace %s", n.GetName())
		}
	}
	for _, s := range h.list(t, schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "", "owner=helm") {
		if _, ok := live[strings.TrimPrefix(s.GetNamespace(), "vc-")]; !ok {
			t.Errorf("orphan Helm release record %s/%s (%s)", s.GetNamespace(), s.GetName(), s.GetLabels()["status"])
		}
	}
}

// ---------------------------------------------------------------- crashes

// killSwitch carries a worker's connections to the API server and can cut
// them all at once, as if the worker's process died: requests in flight
// fail, and nothing the process does afterwards reaches the server (Helm's
// "record the failure" write included).
type killSwitch struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
	d     net.Dialer
}

var errKilled = errors.New("worker process killed (test)")

func (k *killSwitch) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	k.mu.Lock()
	dead := k.dead
	k.mu.Unlock()
	if dead {
		return nil, errKilled
	}
	c, err := k.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		c.Close()
		return nil, errKilled
	}
	k.conns = append(k.conns, c)
	return c, nil
}

func (k *killSwitch) Kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

// discard is a logger for hosts whose goroutines may outlive a test.
var discard = slog.New(slog.DiscardHandler)
