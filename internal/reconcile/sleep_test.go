package reconcile_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// syncedPod creates a pod in the virtual cluster's host namespace the way
// its syncer would (label vcluster.loft.sh/managed-by=<release>, KAI's
// scheduler, its leaf queue); the guardrails admit it.
func (h *harness) syncedPod(t *testing.T, id, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"vcluster.loft.sh/managed-by": hostcluster.ReleaseName(id), hostcluster.KAIQueueLabel: hostcluster.LeafQueueName(id)}},
		Spec: corev1.PodSpec{SchedulerName: hostcluster.KAISchedulerName, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	out, err := h.kube.CoreV1().Pods(hostcluster.NamespaceName(id)).Create(h.ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("synced pod %s: %v", name, err)
	}
	return out
}

func (h *harness) controlPlaneReplicas(t *testing.T, id string) int32 {
	t.Helper()
	sts, err := h.kube.AppsV1().StatefulSets(hostcluster.NamespaceName(id)).Get(h.ctx, hostcluster.ReleaseName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("control plane of %s: %v", id, err)
	}
	if sts.Spec.Replicas == nil {
		return 1
	}
	return *sts.Spec.Replicas
}

func leafLimits(t *testing.T, h *harness, id string) [3]float64 {
	q := h.queue(t, hostcluster.LeafQueueName(id))
	var out [3]float64
	for i, r := range []string{"gpu", "cpu", "memory"} {
		out[i] = number(t, q, "spec", "resources", r, "limit")
	}
	return out
}

// Sleep and wake on the real API server: :sleep scales the control plane
// to zero (through the chart), removes the syncer's workload pods and
// sets the leaf queue's limit to 0, phase SLEEPING; :wake restores all of
// it, SLEEPING -> PROVISIONING -> READY. Only owners and admins may; every
// change is audited.
func TestSleepAndWake(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	w := h.worker(nil, workerConfig("sleep"))
	h.start(t, w)
	h.simulate(t)
	const id = "nap"
	h.createVC(t, "team-a", id, vcSpec("1", 4000, 16*gi))
	h.waitVC(t, id, 90*time.Second, "READY", readyAt)
	if got := leafLimits(t, h, id); got != [3]float64{-1, -1, -1} {
		t.Fatalf("awake leaf queue limits %v, want no limit", got)
	}
	h.syncedPod(t, id, "train-0")
	h.syncedPod(t, id, "train-1")
	name := "teams/team-a/virtualClusters/" + id

	// A member may not; NOT_FOUND for a stranger's team.
	_, err := h.env.VirtualCluster.SleepVirtualCluster(h.env.As(t, "carol"), &pb.SleepVirtualClusterRequest{Name: name})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("sleep as a team member: %v, want PermissionDenied", err)
	}
	_, err = h.env.VirtualCluster.SleepVirtualCluster(h.env.As(t, "dan"), &pb.SleepVirtualClusterRequest{Name: name})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("sleep as another team's owner: %v, want NotFound", err)
	}
	// A stale etag is refused.
	_, err = h.env.VirtualCluster.SleepVirtualCluster(h.env.As(t, "bob"), &pb.SleepVirtualClusterRequest{Name: name, Etag: "stale"})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("sleep with a stale etag: %v, want Aborted", err)
	}

	slept, err := h.env.VirtualCluster.SleepVirtualCluster(h.env.As(t, "bob"), &pb.SleepVirtualClusterRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if !slept.GetSpec().GetSleep() {
		t.Fatalf("after :sleep spec.sleep is false: %v", slept)
	}
	v := h.waitVC(t, id, 60*time.Second, "SLEEPING", inPhase(pb.VirtualClusterStatus_SLEEPING))
	if v.GetStatus().GetObservedGeneration() != v.GetGeneration() || !condTrue(v, reconcile.CondAsleep) {
		t.Errorf("asleep: %s", describe(v))
	}
	if n := h.controlPlaneReplicas(t, id); n != 0 {
		t.Errorf("control plane replicas while asleep: %d, want 0", n)
	}
	pods, err := h.kube.CoreV1().Pods(hostcluster.NamespaceName(id)).List(h.ctx, metav1.ListOptions{LabelSelector: "vcluster.loft.sh/managed-by"})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("workload pods left while asleep: %d (%v)", len(pods.Items), err)
	}
	if got := leafLimits(t, h, id); got != [3]float64{0, 0, 0} {
		t.Errorf("sleeping leaf queue limits %v, want 0 (admit nothing)", got)
	}
	// Sleeping again changes nothing.
	again, err := h.env.VirtualCluster.SleepVirtualCluster(h.env.As(t, "bob"), &pb.SleepVirtualClusterRequest{Name: name})
	if err != nil || again.GetGeneration() != v.GetGeneration() {
		t.Errorf("second :sleep: generation %d -> %d (%v)", v.GetGeneration(), again.GetGeneration(), err)
	}
	// Wake (a department admin): PROVISIONING at once, then READY.
	woken, err := h.env.VirtualCluster.WakeVirtualCluster(h.env.As(t, "alice"), &pb.WakeVirtualClusterRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if woken.GetSpec().GetSleep() || woken.GetStatus().GetPhase() != pb.VirtualClusterStatus_PROVISIONING {
		t.Fatalf("after :wake: sleep %v, phase %s, want false, PROVISIONING", woken.GetSpec().GetSleep(), woken.GetStatus().GetPhase())
	}
	h.waitVC(t, id, 60*time.Second, "READY again", readyAt)
	if n := h.controlPlaneReplicas(t, id); n != 1 {
		t.Errorf("control plane replicas after wake: %d, want 1", n)
	}
	if got := leafLimits(t, h, id); got != [3]float64{-1, -1, -1} {
		t.Errorf("woken leaf queue limits %v, want no limit", got)
	}
	if q := number(t, h.queue(t, hostcluster.LeafQueueName(id)), "spec", "resources", "gpu", "quota"); q != 1 {
		t.Errorf("woken leaf queue GPU quota %v, want 1", q)
	}

	// As requests under approval policies: an approved SLEEP request puts
	// it to sleep and is APPLIED once the host shows it; a policy
	// auto-approves WAKE requests.
	sleepReq := h.submit(t, "team-a", &pb.Request{Payload: &pb.Request_SleepVirtualCluster{
		SleepVirtualCluster: &pb.SleepVirtualClusterPayload{VirtualCluster: name}}})
	h.waitVC(t, id, 60*time.Second, "SLEEPING by request", inPhase(pb.VirtualClusterStatus_SLEEPING))
	waitRequest(t, h, sleepReq.GetName(), pb.Request_APPLIED)
	if _, err := h.env.Policies.CreateApprovalPolicy(h.env.As(t, "alice"), &pb.CreateApprovalPolicyRequest{
		ApprovalPolicyId: "wake-freely", ApprovalPolicy: &pb.ApprovalPolicy{Expression: `request.kind == "WAKE_VIRTUAL_CLUSTER"`}}); err != nil {
		t.Fatal(err)
	}
	wakeReq, err := h.env.Requests.CreateRequest(h.env.As(t, "bob"), &pb.CreateRequestRequest{Request: &pb.Request{
		Team: "teams/team-a", Justification: "morning", Payload: &pb.Request_WakeVirtualCluster{
			WakeVirtualCluster: &pb.WakeVirtualClusterPayload{VirtualCluster: name}}}})
	if err != nil || wakeReq.GetState() != pb.Request_APPROVED || wakeReq.GetKind() != pb.Request_WAKE_VIRTUAL_CLUSTER {
		t.Fatalf("wake request under a policy: %v (%v)", wakeReq, err)
	}
	h.waitVC(t, id, 60*time.Second, "READY after the wake request", readyAt)
	waitRequest(t, h, wakeReq.GetName(), pb.Request_APPLIED)

	// Audited: who put it to sleep and who woke it, and the phases.
	for _, action := range []string{"SleepVirtualCluster", "WakeVirtualCluster", "VirtualClusterPhaseSleeping"} {
		evs := h.auditEvents(t, name, action)
		if len(evs) != 2 {
			t.Errorf("audit %s: %d events, want 2 (method and request)", action, len(evs))
			continue
		}
		if action == "SleepVirtualCluster" && !strings.Contains(evs[len(evs)-1].GetActor(), "bob") {
			t.Errorf("first SleepVirtualCluster by %q, want bob", evs[len(evs)-1].GetActor())
		}
	}
}

func waitRequest(t *testing.T, h *harness, name string, want pb.Request_State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := h.request(t, name)
		if r.GetState() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s is %s, want %s (%s)", name, r.GetState(), want, r.GetFailureMessage())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Auto-sleep after a simulated idle period: team-a sleeps virtual clusters
// idle for an hour. With the worker's clock two hours ahead, the one with
// no GPU allocated goes to sleep (audited as system:auto-sleep); the one
// KAI reports a GPU allocated for stays awake.
func TestAutoSleepAfterIdle(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	team, err := h.env.Teams.GetTeam(h.env.As(t, "alice"), &pb.GetTeamRequest{Name: "teams/team-a"})
	if err != nil {
		t.Fatal(err)
	}
	// Out of range is refused with the field named.
	_, err = h.env.Teams.UpdateTeam(h.env.As(t, "alice"), &pb.UpdateTeamRequest{
		Team:       &pb.Team{Name: team.GetName(), AutoSleepAfter: durationpb.New(time.Minute)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"auto_sleep_after"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "auto_sleep_after") {
		t.Fatalf("auto_sleep_after 1m: %v, want InvalidArgument naming the field", err)
	}
	team, err = h.env.Teams.UpdateTeam(h.env.As(t, "alice"), &pb.UpdateTeamRequest{
		Team:       &pb.Team{Name: team.GetName(), AutoSleepAfter: durationpb.New(time.Hour)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"auto_sleep_after"}}})
	if err != nil || team.GetAutoSleepAfter().AsDuration() != time.Hour {
		t.Fatalf("auto_sleep_after 1h: %v (%v)", team, err)
	}

	var mu sync.Mutex
	clock := time.Now()
	cfg := workerConfig("idle")
	cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	w := h.worker(nil, cfg)
	stop := h.start(t, w)
	h.createVC(t, "team-a", "idle", vcSpec("1", 4000, 16*gi))
	h.createVC(t, "team-a", "busy", vcSpec("1", 4000, 16*gi))
	h.waitVC(t, "idle", 90*time.Second, "READY", readyAt)
	h.waitVC(t, "busy", 90*time.Second, "READY", readyAt)
	stop()
	// KAI reports a GPU allocated to busy; the worker records it.
	h.kaiStatus(t, hostcluster.LeafQueueName("busy"), map[string]any{"allocated": map[string]any{"nvidia.com/gpu": "1"}})
	if _, err := workqueue.Resync(h.ctx, h.pool); err != nil {
		t.Fatal(err)
	}
	h.runOnce(t, w)

	// Not idle long enough yet: nothing sleeps.
	if n, err := w.AutoSleepIdle(h.ctx); err != nil || n != 0 {
		t.Fatalf("auto-sleep before the idle time: %d (%v)", n, err)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Hour)
	mu.Unlock()
	if n, err := w.AutoSleepIdle(h.ctx); err != nil || n != 1 {
		t.Fatalf("auto-sleep after two idle hours: %d put to sleep (%v), want 1", n, err)
	}
	h.start(t, w)
	h.waitVC(t, "idle", 60*time.Second, "SLEEPING", inPhase(pb.VirtualClusterStatus_SLEEPING))
	if v := h.vc(t, "busy"); v.GetSpec().GetSleep() || v.GetStatus().GetPhase() != pb.VirtualClusterStatus_READY {
		t.Errorf("busy (a GPU allocated) after the idle period: %s", describe(v))
	}
	evs := h.auditEvents(t, "teams/team-a/virtualClusters/idle", "SleepVirtualCluster")
	if len(evs) != 1 || !strings.Contains(evs[0].GetActor(), "auto-sleep") {
		t.Errorf("auto-sleep audit: %v", evs)
	}
	// A kubeconfig for a sleeping virtual cluster says how to wake it.
	_, err = h.env.VirtualCluster.GetVirtualClusterKubeconfig(h.env.As(t, "bob"), &pb.GetVirtualClusterKubeconfigRequest{
		Name: "teams/team-a/virtualClusters/idle"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), ":wake") {
		t.Errorf("kubeconfig of a sleeping virtual cluster: %v", err)
	}
}

// With sleeping_keeps_quota false, a sleeping virtual cluster's quota is
// free for its team's others, and waking it must fit again.
func TestSleepingQuotaFreedWhenDepartmentSaysSo(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	h.start(t, h.worker(nil, workerConfig("quota")))
	keep := false
	if _, err := h.env.Departments.UpdateDepartment(h.env.As(t, "alice"), &pb.UpdateDepartmentRequest{
		Department: &pb.Department{Name: "departments/research", SleepingKeepsQuota: &keep},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"sleeping_keeps_quota"}}}); err != nil {
		t.Fatal(err)
	}
	// team-a has 4 GPUs: a (3) and b (3) cannot both be awake.
	h.createVC(t, "team-a", "a", vcSpec("3", 4000, 16*gi))
	h.waitVC(t, "a", 90*time.Second, "READY", readyAt)
	name := "teams/team-a/virtualClusters/a"
	if _, err := h.env.VirtualCluster.SleepVirtualCluster(h.env.As(t, "bob"), &pb.SleepVirtualClusterRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	h.createVC(t, "team-a", "b", vcSpec("3", 4000, 16*gi)) // fits only because a sleeps
	_, err := h.env.VirtualCluster.WakeVirtualCluster(h.env.As(t, "bob"), &pb.WakeVirtualClusterRequest{Name: name})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("waking a while b holds the team's quota: %v, want FailedPrecondition", err)
	}
	if v := h.vc(t, "a"); !v.GetSpec().GetSleep() {
		t.Errorf("a refused wake but is awake: %s", describe(v))
	}
	// Back to the default: the sleeping one's quota counts again, so a
	// third virtual cluster does not fit.
	keep = true
	if _, err := h.env.Departments.UpdateDepartment(h.env.As(t, "alice"), &pb.UpdateDepartmentRequest{
		Department: &pb.Department{Name: "departments/research", SleepingKeepsQuota: &keep},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"sleeping_keeps_quota"}}}); err != nil {
		t.Fatal(err)
	}
	created, err := h.env.Requests.CreateRequest(h.env.As(t, "bob"), &pb.CreateRequestRequest{Request: &pb.Request{
		Team: "teams/team-a", Justification: "test", Payload: &pb.Request_CreateVirtualCluster{
			CreateVirtualCluster: &pb.CreateVirtualClusterPayload{VirtualClusterId: "c", Spec: vcSpec("1", 1000, gi)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.env.Requests.ApproveRequest(h.env.As(t, "alice"), &pb.ApproveRequestRequest{Name: created.GetName()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("approving 1 more GPU while a sleeping 3-GPU cluster keeps its quota: %v, want FailedPrecondition", err)
	}
}
