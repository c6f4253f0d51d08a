package reconcile_test

// End-to-end tests of the worker: requests are made and approved through
// the real API server, the worker converges a real kube-apiserver (envtest)
// and writes status to a real PostgreSQL database.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// 1. Approval -> every host object, with exact quantities -> PROVISIONING
// until the control plane is up -> READY. The server runs its own worker
// (serve --run-worker), so this also covers the production wiring.
func TestApproveProvisionsEverything(t *testing.T) {
	h := newHarness(t, harnessOptions{appWorker: true})
	const id = "vision-dev"
	req := h.createVC(t, "team-a", id, vcSpec("2", 16_000, 64*gi))

	v := h.waitVC(t, id, time.Minute, "applied", applied)
	t.Logf("after the first reconcile: %s", describe(v))

	// Queues: KAI units are devices, millicores and megabytes of 10^6 bytes
	// rounded down; -1 = no limit; the team and department queues on a host
	// cluster cover what the team's and the department's virtual clusters
	// hold there (many host clusters), here just this one.
	for _, q := range []struct {
		name, parent string
		want         map[string]float64
	}{
		{hostcluster.LeafQueueName(id), teamAQueue, map[string]float64{"gpu.quota": 2, "cpu.quota": 16_000, "memory.quota": 68_719}},
		{teamAQueue, deptQueue, map[string]float64{"gpu.quota": 2, "cpu.quota": 16_000, "memory.quota": 68_719}},
		{deptQueue, "", map[string]float64{"gpu.quota": 2, "cpu.quota": 16_000, "memory.quota": 68_719}},
	} {
		obj := h.queue(t, q.name)
		for _, r := range []string{"gpu", "cpu", "memory"} {
			q.want[r+".limit"] = -1
			q.want[r+".overQuotaWeight"] = 1
		}
		for path, want := range q.want {
			res, field, _ := strings.Cut(path, ".")
			if got := number(t, obj, "spec", "resources", res, field); got != want {
				t.Errorf("queue %s: %s = %v, want %v", q.name, path, got, want)
			}
		}
		if got := number(t, obj, "spec", "priority"); got != 100 {
			t.Errorf("queue %s: priority %v", q.name, got)
		}
		parent, _, _ := unstructured.NestedString(obj.Object, "spec", "parentQueue")
		if parent != q.parent {
			t.Errorf("queue %s: parentQueue %q, want %q", q.name, parent, q.parent)
		}
	}
	h.assertPresent(t, id, "team-a")
	if got := h.releases(t, id); !slices.Equal(got, []string{"sh.helm.release.v1." + id + ".v1=deployed"}) {
		t.Errorf("Helm release records %v", got)
	}

	// No kubelet: the control plane is not up, so PROVISIONING.
	if p := v.GetStatus().GetPhase(); p != pb.VirtualClusterStatus_PROVISIONING {
		t.Errorf("phase %s before the control plane is ready, want PROVISIONING", p)
	}
	for _, typ := range []string{reconcile.CondNamespace, reconcile.CondQueues, reconcile.CondGuardrails, reconcile.CondNetworkPolicy, reconcile.CondRelease} {
		if !condTrue(v, typ) {
			t.Errorf("condition %s not true: %s", typ, describe(v))
		}
	}
	if c := condition(v, reconcile.CondControlPlane); c == nil || c.GetStatus() != pb.Condition_FALSE {
		t.Errorf("ControlPlaneReady should be false: %s", describe(v))
	}
	if c := condition(v, reconcile.CondRelease); !strings.Contains(c.GetMessage(), "revision 1, deployed") {
		t.Errorf("ReleaseDeployed message %q", c.GetMessage())
	}
	if !strings.Contains(v.GetStatus().GetMessage(), reconcile.CondControlPlane) {
		t.Errorf("status message %q should name what is awaited", v.GetStatus().GetMessage())
	}
	t.Logf("request while PROVISIONING: %s", h.request(t, req.GetName()).GetState())

	// kubelet + vCluster: StatefulSet ready, kubeconfig Secret written.
	h.markReady(t, id)
	v = h.waitVC(t, id, 30*time.Second, "READY", inPhase(pb.VirtualClusterStatus_READY))
	for _, c := range v.GetStatus().GetConditions() {
		if c.GetStatus() != pb.Condition_TRUE || c.GetObservedGeneration() != v.GetGeneration() {
			t.Errorf("READY but %s", describe(v))
			break
		}
	}
	if got, want := v.GetStatus().GetEndpoint(), "https://vision-dev.vc-vision-dev.svc"; got != want {
		t.Errorf("endpoint %q, want %q", got, want)
	}
	if v.GetStatus().GetMessage() != "" {
		t.Errorf("status message %q when READY", v.GetStatus().GetMessage())
	}
	h.wantRequest(t, req.GetName(), pb.Request_APPLIED)
	if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterPhaseReady")); n != 1 {
		t.Errorf("%d VirtualClusterPhaseReady audit events, want 1", n)
	}
	h.assertNoOrphans(t)
}

// 2. The guardrails approval installs are enforced by the real API server.
func TestAdmissionAfterApproval(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	// With limits: a virtual cluster without one cannot run GPU pods at all
	// (see TestGPUPodsWithoutLimit), and the controls below need GPU pods.
	limit := &pb.Quota{Gpu: "2", CpuMillis: 8000, MemoryBytes: 32 * gi}
	h.createVC(t, "team-a", "vision", &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: "1", CpuMillis: 4000, MemoryBytes: 16 * gi},
		Limit: limit, AllowFractionalGpus: true})
	h.createVC(t, "team-b", "llm", &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: "1", CpuMillis: 4000, MemoryBytes: 16 * gi}, Limit: limit})
	h.runOnce(t, h.worker(nil, workerConfig("w")))
	for _, id := range []string{"vision", "llm"} {
		h.waitVC(t, id, 10*time.Second, "applied", applied)
		h.markQuotaObserved(t, id)
	}
	mine, theirs := hostcluster.LeafQueueName("vision"), hostcluster.LeafQueueName("llm")

	type podOpt func(*corev1.Pod)
	gpus := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{hostcluster.NvidiaGPUResource: resource.MustParse("1")}
	}
	kai := func(p *corev1.Pod) { p.Spec.SchedulerName = hostcluster.KAISchedulerName }
	queue := func(q string) podOpt { return func(p *corev1.Pod) { p.Labels[hostcluster.KAIQueueLabel] = q } }
	fraction := func(p *corev1.Pod) { p.Annotations[hostcluster.KAIFractionAnnot] = "0.5" }
	seq := 0
	create := func(vc string, opts ...podOpt) (*corev1.Pod, error) {
		seq++
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", seq), Labels: map[string]string{}, Annotations: map[string]string{}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		}
		for _, o := range opts {
			o(p)
		}
		return h.kube.CoreV1().Pods(hostcluster.NamespaceName(vc)).Create(h.ctx, p, metav1.CreateOptions{})
	}
	denied := func(what string, err error, fragments ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: admitted, want denied", what)
			return
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: unexpected error: %v", what, err)
		}
		for _, f := range fragments {
			if !strings.Contains(err.Error(), f) {
				t.Errorf("%s: %q does not mention %q", what, err, f)
			}
		}
	}

	_, err := create("vision", gpus, kai, queue(theirs))
	denied("team-a GPU pod naming team-b's queue", err, hostcluster.GuardrailsPolicyName, `must be "`+mine+`"`, theirs)
	_, err = create("vision", gpus, queue(mine))
	denied("GPU pod without schedulerName", err, "schedulerName: kai-scheduler")
	_, err = create("llm", kai, fraction)
	denied("gpu-fraction in DEDICATED team-b", err, hostcluster.GuardrailsPolicyName, "DEDICATED", "gpu-fraction")

	p, err := create("vision", kai, fraction)
	if err != nil {
		t.Errorf("gpu-fraction in SHARED team-a with allow_fractional_gpus: %v", err)
	} else if p.Labels[hostcluster.KAIQueueLabel] != mine {
		t.Errorf("fractional pod put in queue %q, want %q", p.Labels[hostcluster.KAIQueueLabel], mine)
	}
	// Controls: well-formed GPU pods are admitted in both namespaces, so the
	// refusals above are the guardrails' doing.
	if _, err := create("vision", gpus, kai, queue(mine)); err != nil {
		t.Errorf("GPU pod in its own queue (team-a): %v", err)
	}
	if _, err := create("llm", gpus, kai, queue(theirs)); err != nil {
		t.Errorf("GPU pod in its own queue (team-b): %v", err)
	}
}

// 3. A hand edit of the leaf queue (and a deleted network policy) is
// repaired by a resync, and the repair is audited.
func TestDriftIsRepaired(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	const id = "drifty"
	h.createVC(t, "team-a", id, vcSpec("1", 4000, 16*gi))
	stop := h.start(t, h.worker(nil, workerConfig("w1")))
	h.waitVC(t, id, time.Minute, "READY", readyAt)
	stop()

	patch := []byte(`{"spec":{"resources":{"gpu":{"quota":7}}}}`)
	if _, err := h.dyn.Resource(hostcluster.QueueGVR).Patch(h.ctx, hostcluster.LeafQueueName(id), types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	if err := h.kube.NetworkingV1().NetworkPolicies(hostcluster.NamespaceName(id)).Delete(h.ctx, hostcluster.NetworkPolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := workqueue.Resync(h.ctx, h.pool); err != nil || n != 1 {
		t.Fatalf("Resync queued %d (%v), want 1", n, err)
	}
	h.runOnce(t, h.worker(nil, workerConfig("w2")))

	if got := number(t, h.queue(t, hostcluster.LeafQueueName(id)), "spec", "resources", "gpu", "quota"); got != 1 {
		t.Errorf("leaf gpu quota %v after repair, want 1", got)
	}
	if _, err := h.kube.NetworkingV1().NetworkPolicies(hostcluster.NamespaceName(id)).Get(h.ctx, hostcluster.NetworkPolicyName, metav1.GetOptions{}); err != nil {
		t.Errorf("network policy not restored: %v", err)
	}
	v := h.vc(t, id)
	if !readyAt(v) {
		t.Errorf("after repair: %s", describe(v))
	}
	events := h.auditEvents(t, v.GetName(), "RepairDrift")
	if len(events) != 1 {
		t.Fatalf("%d RepairDrift audit events, want 1", len(events))
	}
	after, _ := protojson.Marshal(events[0].GetAfter())
	for _, want := range []string{"resources.gpu.quota: want 1, have 7", "network policy missing"} {
		if !strings.Contains(string(after), want) {
			t.Errorf("RepairDrift event does not mention %q: %s", want, after)
		}
	}
	if events[0].GetActor() != "system:worker" {
		t.Errorf("RepairDrift actor %q", events[0].GetActor())
	}
	if h.queued(t) != 0 {
		t.Errorf("work left in the queue: %s", h.workRow(t, id))
	}
}

// 4. Quota changes reach the leaf queue; a change approved while a
// reconcile of the previous one is in flight is not lost.
func TestQuotaChange(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	const id = "resize"
	create := h.createVC(t, "team-a", id, vcSpec("1", 4000, 16*gi))
	stop := h.start(t, h.worker(nil, workerConfig("w1")))
	h.waitVC(t, id, time.Minute, "READY", readyAt)
	stop()
	h.wantRequest(t, create.GetName(), pb.Request_APPLIED)

	leafGPU := func() float64 {
		return number(t, h.queue(t, hostcluster.LeafQueueName(id)), "spec", "resources", "gpu", "quota")
	}
	q := func(gpu string) *pb.Quota { return &pb.Quota{Gpu: gpu, CpuMillis: 4000, MemoryBytes: 16 * gi} }

	change := h.changeQuota(t, "team-a", id, q("2"))
	if v := h.vc(t, id); v.GetGeneration() != 2 {
		t.Fatalf("after approving a change: generation %d, want 2", v.GetGeneration())
	}
	h.runOnce(t, h.worker(nil, workerConfig("w2")))
	v := h.waitVC(t, id, 10*time.Second, "READY at generation 2", readyAt)
	if got := leafGPU(); got != 2 {
		t.Errorf("leaf gpu quota %v, want 2", got)
	}
	if v.GetStatus().GetObservedGeneration() != 2 {
		t.Errorf("observed generation %d", v.GetStatus().GetObservedGeneration())
	}
	h.wantRequest(t, change.GetName(), pb.Request_APPLIED)

	// A second change approved in the middle of the reconcile of the first.
	bob, alice := h.env.As(t, "bob"), h.env.As(t, "alice")
	for i, step := range []string{"load", "apply", "observe", "record-status"} {
		t.Run("approved during "+step, func(t *testing.T) {
			first, second := []string{"3", "1"}[i%2], []string{"1", "3"}[i%2]
			startGen := h.vc(t, id).GetGeneration()
			r1 := h.changeQuota(t, "team-a", id, q(first))
			var r2 *pb.Request
			var hookErr error
			var once sync.Once
			w := h.worker(nil, workerConfig("inflight-"+step))
			reconcile.SetBeforeStep(w, func(s string) {
				if s == step {
					once.Do(func() {
						r2, hookErr = approveQuotaChange(bob, alice, h, "team-a", id, q(second))
					})
				}
			})
			stop := h.start(t, w)
			v := h.waitVC(t, id, 30*time.Second, "READY at the latest generation", func(v *pb.VirtualCluster) bool {
				return readyAt(v) && v.GetGeneration() == startGen+2
			})
			h.waitIdle(t)
			stop()
			if hookErr != nil || r2 == nil {
				t.Fatalf("second change during %s: %v", step, hookErr)
			}
			if got, want := leafGPU(), map[string]float64{"1": 1, "3": 3}[second]; got != want {
				t.Errorf("leaf gpu quota %v, want %v (the latest change)", got, want)
			}
			if v.GetSpec().GetQuota().GetGpu() != second {
				t.Errorf("spec quota %s", v.GetSpec().GetQuota().GetGpu())
			}
			h.wantRequest(t, r1.GetName(), pb.Request_APPLIED)
			h.wantRequest(t, r2.GetName(), pb.Request_APPLIED)
			if n := h.queued(t); n != 0 {
				t.Errorf("work left in the queue: %s", h.workRow(t, id))
			}
		})
	}
	h.assertPresent(t, id, "team-a")
}

// approveQuotaChange is submit without testing.TB, for hooks running on a
// worker goroutine.
func approveQuotaChange(owner, admin context.Context, h *harness, team, id string, q *pb.Quota) (*pb.Request, error) {
	created, err := h.env.Requests.CreateRequest(owner, &pb.CreateRequestRequest{Request: &pb.Request{
		Team: "teams/" + team, Justification: "in flight",
		Payload: &pb.Request_ChangeVirtualClusterQuota{ChangeVirtualClusterQuota: &pb.ChangeVirtualClusterQuotaPayload{
			VirtualCluster: "teams/" + team + "/virtualClusters/" + id, Quota: q}}}})
	if err != nil {
		return nil, err
	}
	return h.env.Requests.ApproveRequest(admin, &pb.ApproveRequestRequest{Name: created.GetName()})
}

// 5. Delete removes everything; parent queues stay while a sibling uses
// them.
func TestDelete(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	h.createVC(t, "team-a", "del-a", vcSpec("1", 2000, 8*gi))
	h.createVC(t, "team-a", "del-b", vcSpec("1", 2000, 8*gi))
	stop := h.start(t, h.worker(nil, workerConfig("w1")))
	h.waitVC(t, "del-a", time.Minute, "READY", readyAt)
	h.waitVC(t, "del-b", time.Minute, "READY", readyAt)
	stop()
	h.assertPresent(t, "del-a", "team-a")
	h.assertPresent(t, "del-b", "team-a")

	del := h.deleteVC(t, "team-a", "del-a")
	if p := h.vc(t, "del-a").GetStatus().GetPhase(); p != pb.VirtualClusterStatus_DELETING {
		t.Errorf("phase %s after approving the delete", p)
	}
	h.runOnce(t, h.worker(nil, workerConfig("w2")))
	v := h.waitVC(t, "del-a", 10*time.Second, "DELETED", inPhase(pb.VirtualClusterStatus_DELETED))
	h.wantRequest(t, del.GetName(), pb.Request_APPLIED)
	if v.GetStatus().GetEndpoint() != "" || len(v.GetStatus().GetConditions()) != 0 {
		t.Errorf("deleted but %s (endpoint %q)", describe(v), v.GetStatus().GetEndpoint())
	}
	if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterDeleted")); n != 1 {
		t.Errorf("%d VirtualClusterDeleted events", n)
	}
	h.assertGone(t, "del-a")
	h.assertPresent(t, "del-b", "team-a") // includes both parent queues
	if v := h.vc(t, "del-b"); !readyAt(v) {
		t.Errorf("sibling: %s", describe(v))
	}
	h.assertNoOrphans(t)

	del = h.deleteVC(t, "team-a", "del-b")
	h.runOnce(t, h.worker(nil, workerConfig("w3")))
	h.waitVC(t, "del-b", 10*time.Second, "DELETED", inPhase(pb.VirtualClusterStatus_DELETED))
	h.wantRequest(t, del.GetName(), pb.Request_APPLIED)
	h.assertGone(t, "del-b")
	if left := names(h.list(t, hostcluster.QueueGVR, "", "")); len(left) > 0 {
		t.Errorf("queues left after the last virtual cluster went: %v", left)
	}
	h.assertNoOrphans(t)
	if n := h.queued(t); n != 0 {
		t.Errorf("%d work items left", n)
	}
}

// crash runs a worker that dies at step: its API connections are cut and
// its context cancelled, and it never releases its lease. It returns the
// worker's ID.
func (h *harness) crash(t *testing.T, id, step string, lease time.Duration) string {
	t.Helper()
	ks := &killSwitch{}
	cfg := workerConfig("crashed-" + id)
	cfg.Concurrency, cfg.Lease = 1, lease
	w := reconcile.New(store.New(h.pool), h.newHost(ks.DialContext), discard, cfg)
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	var hit atomic.Bool
	reconcile.SetBeforeStep(w, func(s string) {
		if s == step && !hit.Swap(true) {
			ks.Kill()
			cancel()
		}
	})
	_, _ = w.RunOnce(ctx)
	if !hit.Load() {
		t.Fatalf("the worker never reached step %q for %s", step, id)
	}
	var owner string
	if err := h.pool.QueryRow(h.ctx, `SELECT lease_owner FROM reconcile_work WHERE virtual_cluster_id = $1`, id).Scan(&owner); err != nil || owner != cfg.ID {
		t.Fatalf("after the crash the work item should still be leased by %s: owner %q (%v)", cfg.ID, owner, err)
	}
	return cfg.ID
}

// 6. A worker killed at any step: a fresh worker takes over once the lease
// expires and converges without duplicates or orphans.
func TestCrashAtEveryStep(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	converge := func(t *testing.T, id string, cond func(*pb.VirtualCluster) bool, what string) *pb.VirtualCluster {
		t.Helper()
		stop := h.start(t, h.worker(nil, workerConfig("fresh-"+id)))
		defer stop()
		v := h.waitVC(t, id, time.Minute, what, cond)
		h.waitIdle(t) // a resync of a READY virtual cluster changes no phase
		return v
	}
	ready := func(t *testing.T, id string) {
		t.Helper()
		h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
		converge(t, id, readyAt, "READY")
	}
	for _, tc := range []struct {
		step   string
		before func(t *testing.T, id string) string // returns the request to settle
		gone   bool
	}{
		{step: "load"},
		{step: "apply"},
		{step: "observe"},
		{step: "record-status"},
		{step: "observe-before", before: func(t *testing.T, id string) string {
			ready(t, id)
			// A resync of this virtual cluster (drift repair pass).
			if err := store.New(h.pool).InTx(h.ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
				return workqueue.Enqueue(ctx, tx, id)
			}); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{step: "delete", gone: true, before: func(t *testing.T, id string) string {
			ready(t, id)
			return h.deleteVC(t, "team-a", id).GetName()
		}},
		{step: "record-deleted", gone: true, before: func(t *testing.T, id string) string {
			ready(t, id)
			return h.deleteVC(t, "team-a", id).GetName()
		}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			id := "crash-" + tc.step
			var req string
			if tc.before != nil {
				req = tc.before(t, id)
			} else {
				req = h.createVC(t, "team-a", id, vcSpec("0", 100, gi)).GetName()
			}
			start := time.Now()
			h.crash(t, id, tc.step, 2*time.Second)
			if tc.gone {
				converge(t, id, inPhase(pb.VirtualClusterStatus_DELETED), "DELETED")
				h.assertGone(t, id)
			} else {
				converge(t, id, readyAt, "READY")
				h.assertPresent(t, id, "team-a")
				if got := h.releases(t, id); !slices.Equal(got, []string{"sh.helm.release.v1." + id + ".v1=deployed"}) {
					t.Errorf("Helm release records %v, want revision 1 only", got)
				}
			}
			t.Logf("converged %s after the crash", time.Since(start).Round(time.Millisecond))
			if req != "" {
				h.wantRequest(t, req, pb.Request_APPLIED)
			}
			h.assertNoOrphans(t)
			if n := h.queued(t); n != 0 {
				t.Errorf("work left: %s", h.workRow(t, id))
			}
		})
	}
}

// 6b. A worker killed in the middle of a Helm operation leaves the release
// record pending; the next worker must still converge.
func TestInterruptedHelmOperation(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	// killWhen kills a worker as soon as the release record of id shows
	// status (it is written before Helm creates or deletes anything).
	killWhen := func(t *testing.T, id, status string, lease time.Duration) {
		t.Helper()
		ks := &killSwitch{}
		cfg := workerConfig("crashed-" + id)
		cfg.Concurrency, cfg.Lease = 1, lease
		w := reconcile.New(store.New(h.pool), h.newHost(ks.DialContext), discard, cfg)
		ctx, cancel := context.WithCancel(h.ctx)
		defer cancel()
		watcher, err := h.kube.CoreV1().Secrets(hostcluster.NamespaceName(id)).Watch(h.ctx, metav1.ListOptions{LabelSelector: "owner=helm,status=" + status})
		if err != nil {
			t.Fatal(err)
		}
		defer watcher.Stop()
		killed := make(chan struct{})
		go func() {
			for ev := range watcher.ResultChan() {
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					ks.Kill()
					cancel()
					close(killed)
					return
				}
			}
		}()
		_, _ = w.RunOnce(ctx)
		select {
		case <-killed:
		case <-time.After(5 * time.Second):
			t.Fatalf("no release record with status %s appeared", status)
		}
		t.Logf("killed the worker mid-operation; release records now %v", h.releases(t, id))
	}
	converge := func(t *testing.T, id string, cond func(*pb.VirtualCluster) bool, what string) {
		t.Helper()
		cfg := workerConfig("fresh-" + id)
		cfg.MaxAttempts = 3
		stop := h.start(t, h.worker(nil, cfg))
		defer stop()
		h.waitVC(t, id, time.Minute, what, cond)
	}

	t.Run("install", func(t *testing.T) {
		const id = "mid-install"
		req := h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
		killWhen(t, id, "pending-install", 2*time.Second)
		converge(t, id, func(v *pb.VirtualCluster) bool {
			return readyAt(v) || v.GetStatus().GetPhase() == pb.VirtualClusterStatus_FAILED
		}, "READY (or FAILED)")
		if v := h.vc(t, id); !readyAt(v) {
			t.Fatalf("an install interrupted by a worker crash did not converge:\n  %s\n  release records: %v", describe(v), h.releases(t, id))
		}
		h.assertPresent(t, id, "team-a")
		h.wantRequest(t, req.GetName(), pb.Request_APPLIED)
		h.assertNoOrphans(t)
	})

	t.Run("uninstall", func(t *testing.T) {
		const id = "mid-uninstall"
		h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
		converge(t, id, readyAt, "READY")
		req := h.deleteVC(t, "team-a", id)
		killWhen(t, id, "uninstalling", 2*time.Second)
		converge(t, id, func(v *pb.VirtualCluster) bool {
			p := v.GetStatus().GetPhase()
			return p == pb.VirtualClusterStatus_DELETED || p == pb.VirtualClusterStatus_FAILED
		}, "DELETED (or FAILED)")
		if v := h.vc(t, id); v.GetStatus().GetPhase() != pb.VirtualClusterStatus_DELETED {
			t.Fatalf("an uninstall interrupted by a worker crash did not converge:\n  %s\n  release records: %v", describe(v), h.releases(t, id))
		}
		h.assertGone(t, id)
		h.wantRequest(t, req.GetName(), pb.Request_APPLIED)
		h.assertNoOrphans(t)
	})
}

// 7. An apply that keeps failing ends FAILED after MaxAttempts, with the
// error, and so does its request. The failure is a real one: the name of a
// deleted virtual cluster is reused while its namespace is still
// terminating (stuck on a finalizer; in envtest it terminates forever).
func TestFailedAfterMaxAttempts(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	const id = "reused"
	h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
	stop := h.start(t, h.worker(nil, workerConfig("w1")))
	h.waitVC(t, id, time.Minute, "READY", readyAt)
	h.deleteVC(t, "team-a", id)
	h.waitVC(t, id, time.Minute, "DELETED", inPhase(pb.VirtualClusterStatus_DELETED))
	stop()

	req := h.createVC(t, "team-a", id, vcSpec("0", 200, gi))
	cfg := workerConfig("w2")
	cfg.MaxAttempts, cfg.BackoffBase, cfg.BackoffMax = 3, 20*time.Millisecond, 50*time.Millisecond
	stop = h.start(t, h.worker(nil, cfg))
	v := h.waitVC(t, id, 30*time.Second, "FAILED", inPhase(pb.VirtualClusterStatus_FAILED))
	h.waitIdle(t) // the work item goes right after the FAILED status commits
	stop()
	msg := v.GetStatus().GetMessage()
	for _, want := range []string{"gave up after 3 attempts", "namespace vc-reused is being deleted"} {
		if !strings.Contains(msg, want) {
			t.Errorf("status message %q lacks %q", msg, want)
		}
	}
	if c := condition(v, reconcile.CondNamespace); c == nil || c.GetStatus() != pb.Condition_FALSE || c.GetReason() != "ApplyFailed" {
		t.Errorf("NamespaceReady should record the failure: %s", describe(v))
	}
	r := h.wantRequest(t, req.GetName(), pb.Request_FAILED)
	if !strings.Contains(r.GetFailureMessage(), "being deleted") {
		t.Errorf("request failure message %q", r.GetFailureMessage())
	}
	if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterFailed")); n != 1 {
		t.Errorf("%d VirtualClusterFailed events", n)
	}
}

// failingGeneration is a test double around the real host: Apply of one
// generation fails, every other call goes to the real API server. A real
// failure (like the terminating namespace above) fails every generation
// alike, which could not show whether a newer generation gets attempts of
// its own.
type failingGeneration struct {
	reconcile.Host
	gen int64
}

var errInjected = errors.New("injected failure (test double)")

func (f *failingGeneration) Apply(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Steps, error) {
	if vc.Generation == f.gen {
		return hostcluster.Steps{{Step: hostcluster.StepNamespace, Err: errInjected}}, errInjected
	}
	return f.Host.Apply(ctx, vc)
}

// 7b. When the last attempt at generation N fails, a generation N+1
// approved during that attempt is not marked FAILED with it: it gets its
// own attempts.
func TestFailureOfOldGenerationSparesNewer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	const id = "stale-failure"
	create := h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
	cfg := workerConfig("w")
	cfg.MaxAttempts, cfg.BackoffBase, cfg.BackoffMax = 3, 20*time.Millisecond, 50*time.Millisecond
	w := h.worker(&failingGeneration{Host: h.newHost(nil), gen: 1}, cfg)
	bob, alice := h.env.As(t, "bob"), h.env.As(t, "alice")
	var applies atomic.Int32
	var change *pb.Request
	var hookErr error
	reconcile.SetBeforeStep(w, func(s string) {
		if s == "apply" && applies.Add(1) == 3 { // the last attempt at generation 1
			change, hookErr = approveQuotaChange(bob, alice, h, "team-a", id, &pb.Quota{Gpu: "0", CpuMillis: 200, MemoryBytes: gi})
		}
	})
	stop := h.start(t, w)
	v := h.waitVC(t, id, 30*time.Second, "READY or FAILED", func(v *pb.VirtualCluster) bool {
		return readyAt(v) || v.GetStatus().GetPhase() == pb.VirtualClusterStatus_FAILED
	})
	stop()
	if hookErr != nil || change == nil {
		t.Fatalf("quota change during the last attempt: %v", hookErr)
	}
	if !readyAt(v) || v.GetGeneration() != 2 {
		t.Fatalf("generation 2 was never attempted: %s\n  change request: %s", describe(v), h.request(t, change.GetName()).GetFailureMessage())
	}
	h.wantRequest(t, change.GetName(), pb.Request_APPLIED)
	h.wantRequest(t, create.GetName(), pb.Request_APPLIED) // generation 2 includes it
}

// trackingHost records overlapping operations on one virtual cluster
// across workers; it delegates everything to the real host.
type trackingHost struct {
	reconcile.Host
	t *tracker
}

type tracker struct {
	mu       sync.Mutex
	inFlight map[string]string // vc -> worker
	overlaps []string
	applies  map[string]int
}

func (th trackingHost) enter(worker, vc string) func() {
	th.t.mu.Lock()
	defer th.t.mu.Unlock()
	if other, busy := th.t.inFlight[vc]; busy {
		th.t.overlaps = append(th.t.overlaps, fmt.Sprintf("%s: %s and %s at once", vc, other, worker))
	}
	th.t.inFlight[vc] = worker
	return func() { th.t.mu.Lock(); delete(th.t.inFlight, vc); th.t.mu.Unlock() }
}

type workerHost struct {
	trackingHost
	id string
}

func (w workerHost) Apply(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Steps, error) {
	defer w.enter(w.id, vc.Name)()
	w.t.mu.Lock()
	w.t.applies[vc.Name]++
	w.t.mu.Unlock()
	return w.Host.Apply(ctx, vc)
}

func (w workerHost) Delete(ctx context.Context, vc hostcluster.VirtualCluster) error {
	defer w.enter(w.id, vc.Name)()
	return w.Host.Delete(ctx, vc)
}

// 8. Two worker replicas on one queue: every virtual cluster is provisioned
// once, by one of them at a time.
func TestTwoWorkers(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	tr := &tracker{inFlight: map[string]string{}, applies: map[string]int{}}
	for _, id := range []string{"replica-1", "replica-2"} {
		cfg := workerConfig(id)
		cfg.Lease = 30 * time.Second // no lease renewal: must outlast a reconcile
		h.start(t, h.worker(workerHost{trackingHost{h.newHost(nil), tr}, id}, cfg))
	}
	var ids []string
	for i := range 10 {
		team := []string{"team-a", "team-b"}[i%2]
		id := fmt.Sprintf("pair-%02d", i)
		ids = append(ids, id)
		h.createVC(t, team, id, vcSpec("0", 100, gi))
	}
	start := time.Now()
	for _, id := range ids {
		h.waitVC(t, id, 2*time.Minute, "READY", readyAt)
	}
	t.Logf("10 virtual clusters READY %s after the last approval", time.Since(start).Round(time.Millisecond))
	for i, id := range ids {
		v := h.vc(t, id)
		if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterPhaseReady")); n != 1 {
			t.Errorf("%s: %d VirtualClusterPhaseReady events, want exactly 1", id, n)
		}
		if got := h.releases(t, id); !slices.Equal(got, []string{"sh.helm.release.v1." + id + ".v1=deployed"}) {
			t.Errorf("%s: Helm release records %v, want one install", id, got)
		}
		h.assertPresent(t, id, []string{"team-a", "team-b"}[i%2])
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.overlaps) > 0 {
		t.Errorf("concurrent operations on one virtual cluster: %v", tr.overlaps)
	}
	t.Logf("Apply calls per virtual cluster: %v", tr.applies)
	h.assertNoOrphans(t)
}

// 2b. A virtual cluster approved without a limit has no GPU ceiling on the
// host ("without a limit there is no CPU/memory/GPU ceiling", values.go):
// its GPU pods must not be refused by the namespace's ResourceQuota.
func TestGPUPodsWithoutLimit(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	const id = "unlimited"
	h.createVC(t, "team-a", id, vcSpec("1", 4000, 16*gi))
	h.runOnce(t, h.worker(nil, workerConfig("w")))
	h.waitVC(t, id, 10*time.Second, "applied", applied)
	h.markQuotaObserved(t, id)
	ns := hostcluster.NamespaceName(id)
	rq, err := h.kube.CoreV1().ResourceQuotas(ns).Get(h.ctx, hostcluster.KubeconfigSecretName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gpu, capped := rq.Spec.Hard["requests."+hostcluster.NvidiaGPUResource]; capped {
		t.Errorf("ResourceQuota %s/%s caps requests.%s at %s although the virtual cluster has no limit",
			ns, rq.Name, hostcluster.NvidiaGPUResource, gpu.String())
	}
	_, err = h.kube.CoreV1().Pods(ns).Create(h.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Labels: map[string]string{hostcluster.KAIQueueLabel: hostcluster.LeafQueueName(id)}},
		Spec: corev1.PodSpec{SchedulerName: hostcluster.KAISchedulerName, Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{hostcluster.NvidiaGPUResource: resource.MustParse("1")}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("a 1-GPU pod in a virtual cluster with a 1-GPU quota and no limit was refused: %v", err)
	}
}

// 7c. A resync of a READY virtual cluster that fails because the host
// cluster cannot be reached must not turn it FAILED: READY -> FAILED is not
// a phase transition the state machine allows (virtualcluster.Phase.CanMoveTo), and
// FAILED is terminal (no resync, only a new request revives it), so a short
// host outage would otherwise fail every healthy virtual cluster for good.
func TestHostOutageDuringResync(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	const id = "steady"
	h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
	stop := h.start(t, h.worker(nil, workerConfig("w1")))
	h.waitVC(t, id, time.Minute, "READY", readyAt)
	stop()

	// The host API server is unreachable for this worker.
	ks := &killSwitch{}
	ks.Kill()
	cfg := workerConfig("cut-off")
	cfg.MaxAttempts, cfg.BackoffBase, cfg.BackoffMax = 2, 20*time.Millisecond, 50*time.Millisecond
	cfg.HostDownRetry = 100 * time.Millisecond
	if _, err := workqueue.Resync(h.ctx, h.pool); err != nil {
		t.Fatal(err)
	}
	stop = h.start(t, reconcile.New(store.New(h.pool), h.newHost(ks.DialContext), h.log, cfg))
	// Its host cluster is down: DEGRADED with the reason, retried without
	// counting attempts (never FAILED for an outage).
	h.waitVC(t, id, 30*time.Second, "DEGRADED", inPhase(pb.VirtualClusterStatus_DEGRADED))
	time.Sleep(500 * time.Millisecond) // several retries
	stop()
	v := h.vc(t, id)
	t.Logf("after the outage: %s", describe(v))
	if p := v.GetStatus().GetPhase(); p != pb.VirtualClusterStatus_DEGRADED {
		t.Fatalf("a READY virtual cluster whose resync cannot reach the host should stay DEGRADED, got %s", describe(v))
	}
	if msg := v.GetStatus().GetMessage(); !strings.Contains(msg, "host cluster hostClusters/default is unreachable") {
		t.Errorf("status message %q should say its host cluster is unreachable", msg)
	}
	if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterPhaseDegraded")); n != 1 {
		t.Errorf("%d VirtualClusterPhaseDegraded events", n)
	}

	// The host is back: the next resync restores READY.
	if _, err := workqueue.Resync(h.ctx, h.pool); err != nil {
		t.Fatal(err)
	}
	stop = h.start(t, h.worker(nil, workerConfig("w2")))
	h.waitVC(t, id, 30*time.Second, "READY again", readyAt)
	stop()
}

// A worker whose slots are all busy claims the next item as soon as a slot
// frees up, not at its next poll tick (Poll is 1s by default; with many
// approvals queued, each slot would otherwise idle after every reconcile).
func TestBusyWorkerClaimsWhenASlotFrees(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ids := []string{"q-1", "q-2", "q-3", "q-4"}
	for _, id := range ids {
		h.createVC(t, "team-a", id, vcSpec("0", 10, 0))
	}
	cfg := workerConfig("single")
	cfg.Concurrency, cfg.Poll = 1, time.Minute
	start := time.Now()
	stop := h.start(t, h.worker(nil, cfg))
	for _, id := range ids {
		h.waitVC(t, id, 45*time.Second, "applied", applied)
	}
	stop()
	t.Logf("%d virtual clusters applied one at a time in %s (Poll %s)", len(ids), time.Since(start).Round(time.Millisecond), cfg.Poll)
}
