package reconcile_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// crashWorkerEnv, set in a child's environment, makes the test binary a
// worker process (TestMain): the crash test starts it and kills it with
// SIGKILL, over and over.
const crashWorkerEnv = "GPUPLANE_TEST_CRASH_WORKER"

type crashWorkerSpec struct {
	ID         string            `json:"id"`
	DSN        string            `json:"dsn"`
	Kubeconfig string            `json:"kubeconfig"`
	Charts     map[string]string `json:"charts"`
}

// runCrashWorker is the child: a real worker on the test's database and
// API server that prints every reconcile step it starts ("step <name>"),
// so the parent knows where each kill landed. It runs until killed.
func runCrashWorker(raw string) int {
	var spec crashWorkerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "crash worker:", err)
		return 2
	}
	ctx := context.Background()
	pool, err := store.Open(ctx, spec.DSN, 8)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash worker:", err)
		return 2
	}
	rc, err := clientcmd.BuildConfigFromFlags("", spec.Kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash worker:", err)
		return 2
	}
	app.TuneHostConfig(app.Defaults())(rc)
	host, err := hostcluster.New(rc, hostcluster.Options{Settings: hostcluster.Settings{Chart: hostcluster.ChartSource{Dirs: spec.Charts}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash worker:", err)
		return 2
	}
	cfg := workerConfig(spec.ID)
	cfg.Lease = 2 * time.Second
	w := reconcile.New(store.New(pool), host, slog.New(slog.DiscardHandler), cfg)
	var mu sync.Mutex
	reconcile.SetBeforeStep(w, func(step string) {
		mu.Lock()
		fmt.Printf("step %s\n", step)
		mu.Unlock()
	})
	fmt.Println("started")
	_ = w.Run(ctx)
	return 0
}

// crashKills is how many worker processes the crash test kills.
const crashKills = 100

// TestWorkerProcessKilled is the worker half of the fault proof: a worker
// *process* (this test binary in worker mode) is killed with SIGKILL at
// random moments, 100 times, while virtual clusters are created, resized
// and deleted; a fresh one is started after each kill. Then one last worker
// runs undisturbed, and everything converges: every request APPLIED, live
// virtual clusters READY with exactly one of each host object (one Helm
// release, deployed), deleted ones leave nothing behind, no orphans, and
// each change recorded once in the audit log. Where the kills landed (the
// last step each process started) is logged.
func TestWorkerProcessKilled(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := h.api.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	spec := crashWorkerSpec{DSN: h.pool.Config().ConnString(), Kubeconfig: kubeconfig, Charts: h.charts}

	live := []string{"kill-a", "kill-b", "kill-c"}
	doomed := []string{"kill-d", "kill-e"}
	var reqs []string
	for _, id := range append(append([]string{}, live...), doomed...) {
		reqs = append(reqs, h.createVC(t, "team-a", id, vcSpec("0", 100, gi)).GetName())
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	landed := map[string]int{}
	start := time.Now()
	for i := range crashKills {
		switch i {
		case crashKills / 3: // resizes while workers keep dying
			for _, id := range live[:2] {
				reqs = append(reqs, h.changeQuota(t, "team-a", id, &pb.Quota{Gpu: "0", CpuMillis: 200, MemoryBytes: gi}).GetName())
			}
		case crashKills / 2: // and deletes
			for _, id := range doomed {
				reqs = append(reqs, h.deleteVC(t, "team-a", id).GetName())
			}
		}
		// Resyncs keep work queued (drift-repair passes), so kills land in
		// reconciles rather than in an idle worker.
		if _, err := workqueue.Resync(h.ctx, h.pool); err != nil {
			t.Fatal(err)
		}
		spec.ID = fmt.Sprintf("proc-%d", i)
		// Most kills land in reconciles (after the worker is up); every
		// fifth anywhere, start-up included.
		afterStart := i%5 != 0
		last := h.runAndKill(t, spec, afterStart, time.Duration(20+rng.IntN(500))*time.Millisecond)
		landed[last]++
	}
	killed := time.Since(start)

	// One worker, undisturbed, finishes the job.
	stop := h.start(t, h.worker(nil, workerConfig("survivor")))
	for _, id := range live {
		h.waitVC(t, id, 90*time.Second, "READY", func(v *pb.VirtualCluster) bool {
			return readyAt(v) && v.GetStatus().GetObservedGeneration() == v.GetGeneration()
		})
	}
	for _, id := range doomed {
		h.waitVC(t, id, 90*time.Second, "DELETED", inPhase(pb.VirtualClusterStatus_DELETED))
	}
	h.waitIdle(t)
	stop()
	converged := time.Since(start) - killed

	for _, r := range reqs {
		h.wantRequest(t, r, pb.Request_APPLIED)
	}
	for _, id := range live {
		h.assertPresent(t, id, "team-a")
		var deployed int
		for _, rel := range h.releases(t, id) {
			if strings.HasSuffix(rel, "=deployed") {
				deployed++
			}
		}
		if deployed != 1 {
			t.Errorf("%s: Helm release records %v, want exactly one deployed", id, h.releases(t, id))
		}
		v := h.vc(t, id)
		if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterFailed")); n != 0 {
			t.Errorf("%s: %d VirtualClusterFailed events", id, n)
		}
	}
	for _, id := range doomed {
		h.assertGone(t, id)
		v := h.vc(t, id)
		if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterDeleted")); n != 1 {
			t.Errorf("%s: %d VirtualClusterDeleted events, want 1", id, n)
		}
	}
	h.assertNoOrphans(t)
	// Each request was settled once.
	for _, r := range reqs {
		if n := len(h.auditEvents(t, r, "RequestApplied")); n != 1 {
			t.Errorf("%s: %d RequestApplied events, want 1", r, n)
		}
	}
	var points []string
	for step, n := range landed {
		points = append(points, fmt.Sprintf("%s=%d", step, n))
	}
	sort.Strings(points)
	t.Logf("%d worker processes killed with SIGKILL in %s (last step each had started: %s); converged %s after the last kill",
		crashKills, killed.Round(time.Millisecond), strings.Join(points, " "), converged.Round(time.Millisecond))
}

// runAndKill starts a worker process, kills it with SIGKILL d after it
// started (afterStart: after it said it is up) and returns the last
// reconcile step it had started ("startup" if none, "-" if it was not up).
func (h *harness) runAndKill(t *testing.T, spec crashWorkerSpec, afterStart bool, d time.Duration) string {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashWorkerEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	last := "-"
	done, up := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			switch {
			case line == "started":
				last = "startup"
				close(up)
			case strings.HasPrefix(line, "step "):
				last = strings.TrimPrefix(line, "step ")
			}
			mu.Unlock()
		}
	}()
	if afterStart {
		select {
		case <-up:
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	time.Sleep(d)
	mu.Lock()
	at := last
	mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	_ = cmd.Wait()
	return at
}
