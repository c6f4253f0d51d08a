package devenv_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

// devChildEnv makes the test binary run dev mode itself (as `make run`
// does) instead of the tests, so a test can kill it from outside.
const devChildEnv = "GPUPLANE_DEVENV_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(devChildEnv) == "1" {
		os.Exit(runDevMode())
	}
	os.Exit(m.Run())
}

func runDevMode() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := app.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.LogFormat, cfg.LogLevel = "text", "warn"
	cfg.VClusterChartDir = os.Getenv("GPUPLANE_VCLUSTER_CHART_DIR")
	if err := devenv.Run(ctx, devenv.Options{Config: cfg, IssuerAddr: "127.0.0.1:0", Out: os.Stdout}); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "dev mode:", err)
		return 1
	}
	return 0
}

type proc struct {
	pid  int
	comm string
}

// processesUnder lists running processes whose command line mentions dir,
// and all their descendants (PostgreSQL's backends rename themselves).
func processesUnder(dir string) []proc {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	comm := map[int]string{}
	var roots []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !running(pid) {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[closing+2:])
		ppid, _ := strconv.Atoi(fields[1])
		parent[pid], comm[pid] = ppid, s[open+1:closing]
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmdline, []byte(dir)) {
			roots = append(roots, pid)
		}
	}
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	for changed := true; changed; {
		changed = false
		for pid, ppid := range parent {
			if in[ppid] && !in[pid] {
				in[pid], changed = true, true
			}
		}
	}
	var out []proc
	for pid := range in {
		out = append(out, proc{pid, comm[pid]})
	}
	return out
}

// running: the process exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDevModeChildrenDieWithIt starts dev mode as a separate process (its
// own TMPDIR, so everything it starts is recognisable), waits until it
// serves, SIGKILLs it, and expects PostgreSQL (with its backends), etcd,
// kube-apiserver and the lifeline watchdogs gone within seconds and their
// temporary directories removed.
func TestDevModeChildrenDieWithIt(t *testing.T) {
	assets, err := envtestenv.AssetsDir("")
	if err != nil {
		t.Fatal(err) // never skip: a machine without the binaries must not pass
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	chart, err := vclusterchart.Flag(ctx, app.Defaults().VClusterChartVersions)
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "gpuplane-devkill-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	// PostgreSQL runs as the postgres user when we are root; it must be
	// able to reach its directory under tmp.
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}

	dev := exec.Command(os.Args[0], "-test.run=^$")
	dev.Env = append(os.Environ(), devChildEnv+"=1", "TMPDIR="+tmp, "XDG_CACHE_HOME="+filepath.Join(tmp, "cache"),
		"KUBEBUILDER_ASSETS="+assets, "GPUPLANE_VCLUSTER_CHART_DIR="+chart)
	var stderr lockedBuffer
	dev.Stderr = &stderr
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dev.Process.Kill() }()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "gpuplane-dev is running") {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("dev mode ended before serving:\n%s", stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("dev mode not serving after 5 minutes:\n%s", stderr.String())
	}

	children := processesUnder(tmp)
	seen := map[string]int{}
	for _, p := range children {
		seen[p.comm]++
	}
	t.Logf("dev mode (pid %d) runs %d processes under %s: %v", dev.Process.Pid, len(children), tmp, seen)
	for _, want := range []string{"postgres", "etcd", "kube-apiserver"} {
		if seen[want] == 0 {
			t.Fatalf("no %s process found among %v", want, seen)
		}
	}

	killed := time.Now()
	if err := dev.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = dev.Wait()
	deadline := killed.Add(30 * time.Second)
	for {
		var alive []proc
		for _, p := range children {
			if running(p.pid) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range alive {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
			t.Fatalf("30s after dev mode was SIGKILLed, still running: %v", alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
	gone := time.Since(killed)
	t.Logf("all %d processes gone %v after SIGKILL", len(children), gone.Round(time.Millisecond))

	// Directories go right after the processes; allow a moment.
	for {
		entries, _ := os.ReadDir(tmp)
		var left []string
		for _, e := range entries {
			for _, prefix := range []string{"gpuplane-pg-", "k8s_test_framework_", "gpuplane-lifeline-"} {
				if strings.HasPrefix(e.Name(), prefix) {
					left = append(left, e.Name())
				}
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Since(killed) > 40*time.Second {
			t.Fatalf("temporary directories left behind: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
