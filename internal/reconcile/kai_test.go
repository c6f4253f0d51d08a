package reconcile_test

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// kaiStatus plays KAI's queue controller: it writes a queue's status.
func (h *harness) kaiStatus(t testing.TB, queue string, status map[string]any) {
	t.Helper()
	q := h.queue(t, queue)
	q.Object["status"] = status
	if _, err := h.dyn.Resource(hostcluster.QueueGVR).UpdateStatus(h.ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status of queue %s: %v", queue, err)
	}
}

func (h *harness) queueExists(t testing.TB, name string) bool {
	t.Helper()
	_, err := h.dyn.Resource(hostcluster.QueueGVR).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// What KAI reports allocated in the leaf queue reaches the API for all
// three resources, rounded up to the platform's units.
func TestAllocationFromQueueStatus(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	const id = "alloc"
	h.createVC(t, "team-a", id, vcSpec("2", 8000, 16*gi))
	stop := h.start(t, h.worker(nil, workerConfig("w1")))
	h.waitVC(t, id, time.Minute, "READY", readyAt)
	stop()

	// KAI's queue controller: the summed requests of running pods, as a
	// Kubernetes resource list (cpu in cores, memory in bytes, GPU devices).
	h.kaiStatus(t, hostcluster.LeafQueueName(id), map[string]any{"allocated": map[string]any{
		"nvidia.com/gpu": "1505m", "cpu": "2500m", "memory": "3Gi", "pods": "3",
	}})
	if _, err := workqueue.Resync(h.ctx, h.pool); err != nil {
		t.Fatal(err)
	}
	h.runOnce(t, h.worker(nil, workerConfig("w2")))
	got := h.vc(t, id).GetStatus().GetAllocated()
	want := &pb.Quota{Gpu: "1.51", CpuMillis: 2500, MemoryBytes: 3 * gi} // 1.505 GPU rounds up
	if got.GetGpu() != want.Gpu || got.GetCpuMillis() != want.CpuMillis || got.GetMemoryBytes() != want.MemoryBytes {
		t.Errorf("allocated %v, want %v", got, want)
	}
}

// Deleting a virtual cluster removes its leaf queue at once and each parent
// only after KAI's status stops listing the child (KAI's webhook refuses
// otherwise); meanwhile the virtual cluster stays DELETING without failing.
func TestDeleteWaitsForKAIToForgetTheChild(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	const id = "kai-del"
	leaf := hostcluster.LeafQueueName(id)
	h.createVC(t, "team-a", id, vcSpec("1", 2000, 8*gi))
	stop := h.start(t, h.worker(nil, workerConfig("w1")))
	h.waitVC(t, id, time.Minute, "READY", readyAt)
	stop()
	h.kaiStatus(t, teamAQueue, map[string]any{"childQueues": []any{leaf}})
	h.kaiStatus(t, deptQueue, map[string]any{"childQueues": []any{teamAQueue}})

	del := h.deleteVC(t, "team-a", id)
	w := h.worker(nil, workerConfig("w2"))
	step := func(what string, wantTeam, wantDept bool, wantPhase pb.VirtualClusterStatus_Phase) {
		t.Helper()
		time.Sleep(60 * time.Millisecond) // the requeue delay (Poll) has passed
		h.runOnce(t, w)
		if h.queueExists(t, leaf) {
			t.Errorf("%s: leaf queue %s still there", what, leaf)
		}
		if got := h.queueExists(t, teamAQueue); got != wantTeam {
			t.Errorf("%s: team queue exists=%v, want %v", what, got, wantTeam)
		}
		if got := h.queueExists(t, deptQueue); got != wantDept {
			t.Errorf("%s: department queue exists=%v, want %v", what, got, wantDept)
		}
		if p := h.vc(t, id).GetStatus().GetPhase(); p != wantPhase {
			t.Errorf("%s: phase %s, want %s", what, p, wantPhase)
		}
	}
	step("KAI still lists the leaf", true, true, pb.VirtualClusterStatus_DELETING)
	step("asked again, unchanged", true, true, pb.VirtualClusterStatus_DELETING)
	h.kaiStatus(t, teamAQueue, map[string]any{})
	step("KAI dropped the leaf", false, true, pb.VirtualClusterStatus_DELETING)
	h.kaiStatus(t, deptQueue, map[string]any{})
	step("KAI dropped the team", false, false, pb.VirtualClusterStatus_DELETED)
	h.wantRequest(t, del.GetName(), pb.Request_APPLIED)
	h.assertGone(t, id)
	h.assertNoOrphans(t)
}
