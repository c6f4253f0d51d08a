package lifeline_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/devenv/lifeline"
)

// ownerEnv makes the test binary act as a process that arms a line, starts
// children and then waits to be killed.
const ownerEnv = "LIFELINE_TEST_OWNER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(ownerEnv); dir != "" {
		if err := runOwner(dir); err != nil {
			fmt.Fprintln(os.Stderr, "owner:", err)
			os.Exit(1)
		}
		select {} // until killed
	}
	os.Exit(m.Run())
}

// runOwner starts two children as dev mode does: one watched by PID, one
// through a wrapper (as envtest's processes are), each in its own process
// group, plus a directory to remove; it prints their PIDs and "ready".
func runOwner(dir string) error {
	line, err := lifeline.Start(lifeline.Options{Name: "test", Signal: "TERM", Grace: time.Second, Remove: []string{filepath.Join(dir, "state")}})
	if err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o755); err != nil {
		return err
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return err
	}
	watched := exec.Command(sleep, "1000")
	watched.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := watched.Start(); err != nil {
		return err
	}
	if err := line.Watch(watched.Process.Pid, sleep); err != nil {
		return err
	}
	wrapper, err := line.Wrap(sleep)
	if err != nil {
		return err
	}
	wrapped := exec.Command(wrapper, "1000")
	wrapped.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := wrapped.Start(); err != nil {
		return err
	}
	// The wrapper records itself before exec; wait until it is sleep.
	for range 100 {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", wrapped.Process.Pid)); exe != "" && !strings.HasSuffix(exe, "sh") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("%d %d\nready\n", watched.Process.Pid, wrapped.Process.Pid)
	return nil
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	return !strings.HasPrefix(s[strings.LastIndex(s, ")")+2:], "Z")
}

// TestChildrenDieWithOwner SIGKILLs a process holding a line: its watched
// and wrapped children are gone and its directory removed within seconds.
func TestChildrenDieWithOwner(t *testing.T) {
	dir := t.TempDir()
	owner := exec.Command(os.Args[0], "-test.run=^$")
	owner.Env = append(os.Environ(), ownerEnv+"="+dir)
	owner.Stderr = os.Stderr
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owner.Process.Kill() }()
	sc := bufio.NewScanner(out)
	var pids []int
	for sc.Scan() && sc.Text() != "ready" {
		for _, f := range strings.Fields(sc.Text()) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("owner said %q", sc.Text())
			}
			pids = append(pids, n)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("owner gave pids %v", pids)
	}
	for _, p := range pids {
		if !running(p) {
			t.Fatalf("child %d not running before the kill", p)
		}
	}

	killed := time.Now()
	if err := owner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	deadline := killed.Add(10 * time.Second)
	for {
		alive := 0
		for _, p := range pids {
			if running(p) {
				alive++
			}
		}
		_, statErr := os.Stat(filepath.Join(dir, "state"))
		if alive == 0 && os.IsNotExist(statErr) {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("10s after the owner's SIGKILL: %d children still running, state dir err %v", alive, statErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("children gone and directory removed %v after the owner's SIGKILL", time.Since(killed).Round(time.Millisecond))
}

func startSleep(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sleep, "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-waited(cmd) })
	return cmd, sleep
}

var waits sync.Map // *exec.Cmd -> chan struct{}

// waited is closed once cmd has ended; cmd.Wait runs once, however many
// callers (exited, the cleanup) wait for it.
func waited(cmd *exec.Cmd) <-chan struct{} {
	ch, loaded := waits.LoadOrStore(cmd, make(chan struct{}))
	if !loaded {
		go func() { _ = cmd.Wait(); close(ch.(chan struct{})) }()
	}
	return ch.(chan struct{})
}

// exited waits (bounded) for cmd to end and reports whether it did.
func exited(cmd *exec.Cmd, within time.Duration) bool {
	select {
	case <-waited(cmd):
		return true
	case <-time.After(within):
		return false
	}
}

func TestReleaseLeavesChildrenAlone(t *testing.T) {
	cmd, sleep := startSleep(t)
	line, err := lifeline.Start(lifeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := line.Watch(cmd.Process.Pid, sleep); err != nil {
		t.Fatal(err)
	}
	if err := line.Release(); err != nil {
		t.Fatal(err)
	}
	if err := line.Release(); err != nil {
		t.Fatalf("second release: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if !running(cmd.Process.Pid) {
		t.Fatal("released line killed its child")
	}
}

func TestCutKillsNowAndEscalates(t *testing.T) {
	// A child that ignores the first signal is killed after the grace.
	cmd := exec.Command("/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.05; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	line, err := lifeline.Start(lifeline.Options{Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := line.Watch(cmd.Process.Pid, "/bin/sh"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := line.Cut(); err != nil {
		t.Fatal(err)
	}
	if !exited(cmd, 5*time.Second) {
		t.Fatal("child ignoring SIGTERM survived the cut")
	}
	t.Logf("stubborn child gone %v after the cut", time.Since(start).Round(time.Millisecond))
}

// TestReusedPIDIsSpared: a recorded PID that now runs another program (the
// kernel reused it) is not signalled.
func TestReusedPIDIsSpared(t *testing.T) {
	cmd, _ := startSleep(t)
	line, err := lifeline.Start(lifeline.Options{Signal: "KILL"})
	if err != nil {
		t.Fatal(err)
	}
	if err := line.Watch(cmd.Process.Pid, "/bin/sh"); err != nil {
		t.Fatal(err)
	}
	if err := line.Cut(); err != nil {
		t.Fatal(err)
	}
	if exited(cmd, 300*time.Millisecond) {
		t.Fatal("a process running another executable than recorded was killed")
	}
}
