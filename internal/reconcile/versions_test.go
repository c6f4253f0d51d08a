package reconcile_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
)

// TestChartUpgradeThroughTheWorker: a virtual cluster created on chart
// 0.20 (as every one before 0.36 became the default) keeps it across
// resyncs, and a CHANGE_VIRTUAL_CLUSTER_VERSION request moves it to 0.36.1
// through the worker: one Helm upgrade of the same release, values valid
// for the new chart, the request APPLIED.
func TestChartUpgradeThroughTheWorker(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	w := h.worker(nil, workerConfig("upgrade"))
	const id = "legacy"
	h.applyOnOldChart(t, w, id, nil)
	ns := hostcluster.NamespaceName(id)
	image := func() string {
		t.Helper()
		sts, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, hostcluster.ReleaseName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sts.Spec.Template.Spec.Containers[0].Image
	}
	if got := image(); got != "ghcr.io/loft-sh/vcluster-oss:0.20.0" {
		t.Errorf("control plane image %s on chart 0.20", got)
	}
	h.readyAfter(t, w, id)

	req, v := h.upgradeTo0361(t, w, id)
	if s := v.GetSpec(); s.GetChartVersion() != "0.36.1" || s.GetKubernetesVersion() != "v1.30.2" {
		t.Errorf("spec after the upgrade: chart %s, Kubernetes %s", s.GetChartVersion(), s.GetKubernetesVersion())
	}
	if c := condition(v, reconcile.CondRelease); !strings.Contains(c.GetMessage(), "revision 2, deployed") {
		t.Errorf("release after the upgrade: %s", describe(v))
	}
	if got := image(); got != "ghcr.io/loft-sh/vcluster-oss:0.36.1" {
		t.Errorf("control plane image %s after the upgrade", got)
	}
	h.wantRequest(t, req.GetName(), pb.Request_APPLIED)
	h.assertPresent(t, id, "team-a")
}

// TestOldChartFractionalGPUsRefusedUntilUpgrade: a virtual cluster created
// on chart 0.20 with allow_fractional_gpus (possible before 0.36.1 was
// offered; the API refuses it now) is rendered with shared GPUs refused by
// its guardrails, since that chart's syncer drops runai-gpu-group from host
// pods; it still becomes READY, and its owner reads why and what to do in
// condition FractionalGPUsAvailable and the status message. Upgraded to
// 0.36.1, shared GPUs are allowed again and the condition turns true.
func TestOldChartFractionalGPUsRefusedUntilUpgrade(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	w := h.worker(nil, workerConfig("frac-old"))
	const id = "frac-old"
	// What the shared guardrails refuse shared GPUs with in its namespace
	// ("" when they allow them).
	sharedGPURule := func() string {
		t.Helper()
		ns, err := h.kube.CoreV1().Namespaces().Get(h.ctx, hostcluster.NamespaceName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		refusal, ok := ns.Annotations[hostcluster.GuardrailParamPrefix+"shared-gpus-refused"]
		if !ok {
			t.Fatalf("namespace %s has no guardrail parameters: %v", ns.Name, ns.Annotations)
		}
		return refusal
	}
	h.applyOnOldChart(t, w, id, func() {
		// As a row written before chart 0.20 lost fractional GPUs.
		if _, err := h.pool.Exec(h.ctx, `UPDATE virtual_clusters SET allow_fractional_gpus = true WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	})
	if rule := sharedGPURule(); !strings.Contains(rule, "runs vCluster chart 0.20.0, whose syncer drops runai-gpu-group") {
		t.Errorf("chart 0.20 with fractional GPUs: shared-GPU rule %q, want the chart's refusal", rule)
	}
	v := h.readyAfter(t, w, id)
	c := condition(v, reconcile.CondFractionalGPUs)
	if c.GetStatus() != pb.Condition_FALSE || c.GetReason() != "ChartDropsGPUGroup" ||
		!strings.Contains(c.GetMessage(), "upgrade to chart 0.36.1") {
		t.Errorf("condition %s: %v", reconcile.CondFractionalGPUs, c)
	}
	if msg := v.GetStatus().GetMessage(); msg != c.GetMessage() {
		t.Errorf("READY status message %q, want the notice %q", msg, c.GetMessage())
	}

	_, v = h.upgradeTo0361(t, w, id)
	if rule := sharedGPURule(); rule != "" {
		t.Errorf("after the upgrade shared GPUs are still refused: %q", rule)
	}
	if c := condition(v, reconcile.CondFractionalGPUs); c.GetStatus() != pb.Condition_TRUE || c.GetReason() != "Available" {
		t.Errorf("after the upgrade, condition %s: %v", reconcile.CondFractionalGPUs, c)
	}
}

// applyOnOldChart creates virtual cluster id of team-a on chart 0.20 (as
// every one was before 0.36.1), lets prepare change its row, and applies it
// with w.
func (h *harness) applyOnOldChart(t *testing.T, w *reconcile.Worker, id string, prepare func()) {
	t.Helper()
	spec := vcSpec("1", 2000, 8*gi)
	spec.ChartVersion = "0.20.0"
	h.createVC(t, "team-a", id, spec)
	if prepare != nil {
		prepare()
	}
	h.runOnce(t, w)
	h.waitVC(t, id, 30*time.Second, "applied", applied)
}

// readyAfter marks the control plane of id ready and lets w see it READY.
func (h *harness) readyAfter(t *testing.T, w *reconcile.Worker, id string) *pb.VirtualCluster {
	t.Helper()
	h.markReady(t, id)
	stop := h.start(t, w)
	defer stop()
	return h.waitVC(t, id, 30*time.Second, "READY", readyAt)
}

// upgradeTo0361 asks for chart 0.36.1 for team-a's id (approved) and
// applies it with w.
func (h *harness) upgradeTo0361(t *testing.T, w *reconcile.Worker, id string) (*pb.Request, *pb.VirtualCluster) {
	t.Helper()
	req := h.submit(t, "team-a", &pb.Request{Payload: &pb.Request_ChangeVirtualClusterVersion{
		ChangeVirtualClusterVersion: &pb.ChangeVirtualClusterVersionPayload{
			VirtualCluster: "teams/team-a/virtualClusters/" + id, ChartVersion: "0.36.1"}}})
	h.runOnce(t, w)
	return req, h.waitVC(t, id, 60*time.Second, "applied", applied)
}
