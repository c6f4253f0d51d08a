package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/reconcile"
)

// TestProvisioningDeadline: a control plane that never becomes ready (no
// kubelet plays its part here) leaves the virtual cluster PROVISIONING only
// until the deadline; then it is DEGRADED with what it waits for in its
// status message, one audit event and the deadline counter. The worker
// keeps looking: once the control plane starts it becomes READY.
func TestProvisioningDeadline(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	const id = "never-up"
	h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
	reg := prometheus.NewRegistry()
	cfg := workerConfig("deadline")
	cfg.ProvisioningDeadline = 2 * time.Second
	cfg.Metrics = reg
	h.start(t, h.worker(nil, cfg))

	v := h.waitVC(t, id, time.Minute, "applied", applied)
	if p := v.GetStatus().GetPhase(); p != pb.VirtualClusterStatus_PROVISIONING {
		t.Fatalf("before the deadline: %s, want PROVISIONING", describe(v))
	}
	v = h.waitVC(t, id, 30*time.Second, "DEGRADED at the deadline", inPhase(pb.VirtualClusterStatus_DEGRADED))
	t.Logf("at the deadline: %s", describe(v))
	msg := v.GetStatus().GetMessage()
	if !strings.Contains(msg, reconcile.CondControlPlane) || !strings.Contains(msg, "provisioning deadline (2s)") {
		t.Errorf("status message %q should name the control plane and the deadline", msg)
	}
	events := h.auditEvents(t, v.GetName(), "VirtualClusterPhaseDegraded")
	if len(events) != 1 {
		t.Fatalf("%d VirtualClusterPhaseDegraded events, want 1", len(events))
	}
	if got := events[0].GetAfter().GetFields()["status"].GetStructValue().GetFields()["message"].GetStringValue(); !strings.Contains(got, "provisioning deadline") {
		t.Errorf("the audit event's status message %q does not carry the reason", got)
	}
	if n := counterValue(t, reg, "gpuplane_reconcile_provisioning_deadline_exceeded_total", nil); n != 1 {
		t.Errorf("gpuplane_reconcile_provisioning_deadline_exceeded_total = %v, want 1", n)
	}

	// Still DEGRADED (not flapping back to PROVISIONING) while it waits.
	time.Sleep(500 * time.Millisecond)
	if p := h.vc(t, id).GetStatus().GetPhase(); p != pb.VirtualClusterStatus_DEGRADED {
		t.Errorf("while still waiting: %v, want DEGRADED", p)
	}
	h.markReady(t, id)
	h.waitVC(t, id, 30*time.Second, "READY once the control plane starts", readyAt)
	if n := counterValue(t, reg, "gpuplane_reconcile_provisioning_deadline_exceeded_total", nil); n != 1 {
		t.Errorf("gpuplane_reconcile_provisioning_deadline_exceeded_total = %v after recovery, want 1", n)
	}
}
