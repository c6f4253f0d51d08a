package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	gpnames "github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/server/api"
)

// secondCluster is a second real API server registered as host cluster
// devenv.SecondHostCluster (SHARED only, region=us-east, gpu-model=h100),
// reached through a kubeconfig Secret on the first, as dev mode's
// --second-host-cluster does. Its shared pool is small (one node, 2 GPUs)
// so that capacity decides placement.
type secondCluster struct {
	env  *envtestenv.Env
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func (h *harness) startSecondCluster(t *testing.T) *secondCluster {
	t.Helper()
	sctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	env, err := envtestenv.Start(sctx, envtestenv.Options{})
	if err != nil {
		t.Fatalf("second real API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	rc := env.RESTConfig()
	s := &secondCluster{env: env, kube: kubernetes.NewForConfigOrDie(rc), dyn: dynamic.NewForConfigOrDie(rc)}
	nodes := []devenv.FakeNode{{Name: "east-gpu-1", Pool: gpnames.SharedPool, GPUs: 2, CPU: "32", Mem: "256Gi"}}
	if err := devenv.CreateNodes(sctx, s.kube, nodes); err != nil {
		t.Fatal(err)
	}
	if err := devenv.KAIStandIn(sctx, s.kube); err != nil {
		t.Fatal(err)
	}
	if err := devenv.StoreKubeconfigSecret(sctx, h.kube, "gpuplane-system", devenv.DevKubeconfigSecret, env.Kubeconfig()); err != nil {
		t.Fatal(err)
	}
	go devenv.SimulateControlPlanes(h.ctx, rc, 50*time.Millisecond, func(string, ...any) {})
	return s
}

func (s *secondCluster) hasQueue(t *testing.T, ctx context.Context, name string) bool {
	t.Helper()
	_, err := s.dyn.Resource(hostcluster.QueueGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("queue %s on the second cluster: %v", name, err)
	}
	return err == nil
}

func hostClusterOf(v *pb.VirtualCluster) string { return v.GetStatus().GetHostCluster() }

// Two real API servers at once: placement by labels, tier and capacity;
// each virtual cluster's objects (and its department's queue hierarchy)
// land on its own host cluster only; stopping one host cluster degrades
// only its virtual clusters while the others keep converging; a host
// cluster still hosting virtual clusters cannot be deleted.
func TestTwoHostClusters(t *testing.T) {
	h := newHarness(t, harnessOptions{fleet: true})
	if err := devenv.CreateNodes(h.ctx, h.kube, devenv.DemoNodes); err != nil {
		t.Fatal(err)
	}
	east := h.startSecondCluster(t)
	admin := reqctx.WithPrincipal(h.ctx, devenv.Principal("alice"))
	if err := devenv.SeedFleet(admin, h.env.App.API, true); err != nil {
		t.Fatal(err)
	}

	registry, err := hostcluster.NewRegistry(h.rc, "gpuplane-system",
		hostcluster.Options{Settings: hostcluster.Settings{Chart: hostcluster.ChartSource{Dirs: h.charts}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := workerConfig("fleet")
	cfg.Hosts = reconcile.Registry(registry)
	cfg.ObserveInterval, cfg.ProbeTimeout, cfg.HostDownRetry = 200*time.Millisecond, 2*time.Second, 300*time.Millisecond
	w := h.worker(nil, cfg)
	if err := w.ObserveHostClusters(h.ctx); err != nil {
		t.Fatal(err)
	}
	hcs := &api.HostClusters{API: h.env.App.API}
	got, err := hcs.GetHostCluster(admin, &pb.GetHostClusterRequest{Name: "hostClusters/" + devenv.SecondHostCluster})
	if err != nil {
		t.Fatal(err)
	}
	st := got.GetStatus()
	if !st.GetReachable() || st.GetKubernetesVersion() == "" || !strings.Contains(st.GetKaiVersion(), "stand-in") ||
		len(st.GetNodePools()) != 1 || st.GetNodePools()[0].GetCapacity().GetGpu() != "2" {
		t.Fatalf("observed second host cluster: %v", st)
	}
	// Capacity is what the worker saw on both: the demo department fits.
	if err := devenv.Seed(h.ctx, h.env.App.API); err != nil {
		t.Fatalf("seed against observed capacity: %v", err)
	}
	stop := h.start(t, w)
	defer stop()
	h.simulate(t)

	// By labels: the one cluster in us-east.
	usEast := vcSpec("1", 4000, 16*gi)
	usEast.Placement = &pb.Placement{HostClusterLabels: map[string]string{"region": "us-east"}}
	h.createVC(t, "team-a", "east-1", usEast)
	// Unconstrained: the one with the most GPUs left (default: 16 shared
	// GPUs against east's 1).
	h.createVC(t, "team-a", "west-1", vcSpec("1", 4000, 16*gi))
	// DEDICATED: only default takes the tier.
	h.createVC(t, "team-b", "ded-1", vcSpec("1", 4000, 16*gi))
	for id, want := range map[string]string{"east-1": "hostClusters/gpu-east", "west-1": "hostClusters/default", "ded-1": "hostClusters/default"} {
		v := h.waitVC(t, id, 90*time.Second, "READY", readyAt)
		if hostClusterOf(v) != want {
			t.Errorf("%s placed on %q, want %q", id, hostClusterOf(v), want)
		}
	}
	// Each virtual cluster's namespace and leaf queue exist on its host
	// cluster only; the department's queues exist on both.
	if _, err := east.kube.CoreV1().Namespaces().Get(h.ctx, hostcluster.NamespaceName("east-1"), metav1.GetOptions{}); err != nil {
		t.Errorf("east-1's namespace on gpu-east: %v", err)
	}
	if _, err := h.kube.CoreV1().Namespaces().Get(h.ctx, hostcluster.NamespaceName("east-1"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("east-1's namespace on default: %v, want NotFound", err)
	}
	if !east.hasQueue(t, h.ctx, hostcluster.LeafQueueName("east-1")) || !east.hasQueue(t, h.ctx, deptQueue) || !east.hasQueue(t, h.ctx, teamAQueue) {
		t.Error("gpu-east lacks east-1's queue hierarchy")
	}
	if east.hasQueue(t, h.ctx, hostcluster.LeafQueueName("west-1")) || east.hasQueue(t, h.ctx, teamBQueue) {
		t.Error("gpu-east has queues of virtual clusters placed on default")
	}
	h.queue(t, hostcluster.LeafQueueName("west-1"))
	h.queue(t, teamBQueue)

	// Capacity per host cluster: gpu-east has 1 GPU left, so a 2-GPU
	// virtual cluster asking for h100s is refused with the pool named.
	big := vcSpec("2", 4000, 16*gi)
	big.Placement = &pb.Placement{HostClusterLabels: map[string]string{"gpu-model": "h100"}}
	created, err := h.env.Requests.CreateRequest(h.env.As(t, "bob"), &pb.CreateRequestRequest{Request: &pb.Request{
		Team: "teams/team-a", Justification: "test", Payload: &pb.Request_CreateVirtualCluster{
			CreateVirtualCluster: &pb.CreateVirtualClusterPayload{VirtualClusterId: "east-big", Spec: big}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.env.Requests.ApproveRequest(h.env.As(t, "alice"), &pb.ApproveRequestRequest{Name: created.GetName()})
	if err == nil || !strings.Contains(err.Error(), "hostClusters/gpu-east/nodePools/shared") {
		t.Fatalf("approving 2 GPUs on gpu-east (1 free): %v", err)
	}

	// A host cluster hosting virtual clusters cannot be deleted; the
	// refusal lists them.
	_, err = hcs.DeleteHostCluster(admin, &pb.DeleteHostClusterRequest{Name: "hostClusters/" + devenv.SecondHostCluster})
	if errs.KindOf(err) != errs.KindFailedPrecondition || !strings.Contains(err.Error(), "east-1") {
		t.Fatalf("deleting a host cluster that hosts east-1: %v", err)
	}

	// gpu-east goes away: only east-1 degrades, and says why.
	if err := east.env.Stop(); err != nil {
		t.Logf("stopping the second API server: %v", err)
	}
	v := h.waitVC(t, "east-1", 60*time.Second, "DEGRADED", inPhase(pb.VirtualClusterStatus_DEGRADED))
	if c := condition(v, reconcile.CondHostCluster); c == nil || c.GetStatus() != pb.Condition_FALSE ||
		!strings.Contains(v.GetStatus().GetMessage(), "host cluster hostClusters/gpu-east is unreachable") {
		t.Errorf("east-1 while gpu-east is down: %s", describe(v))
	}
	// Why it is down names how it is reached (its kubeconfig Secret, its
	// API server's address): the HostCluster keeps that for platform
	// admins; east-1's status and audit trail, which its team reads, do not
	// carry it.
	eastAPI := strings.TrimSuffix(strings.TrimPrefix(east.env.RESTConfig().Host, "https://"), "/")
	assertNoHostDetail(t, v, devenv.DevKubeconfigSecret, eastAPI)
	h.assertNoHostDetailInAudit(t, v.GetName(), devenv.DevKubeconfigSecret, eastAPI)
	got, err = hcs.GetHostCluster(admin, &pb.GetHostClusterRequest{Name: "hostClusters/" + devenv.SecondHostCluster})
	if err != nil || got.GetStatus().GetReachable() || got.GetStatus().GetUnreachableSince() == nil ||
		!strings.Contains(got.GetStatus().GetMessage(), eastAPI) {
		t.Errorf("gpu-east's status while down (an admin sees why): %v (%v)", got.GetStatus(), err)
	}
	// The others keep converging: a quota change and a new virtual cluster
	// on default are applied while gpu-east is down.
	h.changeQuota(t, "team-a", "west-1", &pb.Quota{Gpu: "2", CpuMillis: 4000, MemoryBytes: 16 * gi})
	h.createVC(t, "team-a", "west-2", vcSpec("1", 4000, 16*gi))
	h.waitVC(t, "west-1", 60*time.Second, "READY at the new quota", func(v *pb.VirtualCluster) bool {
		return readyAt(v) && v.GetSpec().GetQuota().GetGpu() == "2"
	})
	if n := number(t, h.queue(t, hostcluster.LeafQueueName("west-1")), "spec", "resources", "gpu", "quota"); n != 2 {
		t.Errorf("west-1's leaf queue quota %v, want 2", n)
	}
	if v := h.waitVC(t, "west-2", 60*time.Second, "READY", readyAt); hostClusterOf(v) != "hostClusters/default" {
		t.Errorf("west-2 placed on %q while gpu-east is down", hostClusterOf(v))
	}
	for _, id := range []string{"ded-1"} {
		if v := h.vc(t, id); v.GetStatus().GetPhase() != pb.VirtualClusterStatus_READY {
			t.Errorf("%s on default while gpu-east is down: %s", id, describe(v))
		}
	}
	if v := h.vc(t, "east-1"); v.GetStatus().GetPhase() != pb.VirtualClusterStatus_DEGRADED {
		t.Errorf("east-1 left DEGRADED while gpu-east is still down: %s", describe(v))
	}
}
