package pgserver

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestStartCreateStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	srv, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Stop()
		}
	})

	if !strings.HasPrefix(srv.Dir(), os.TempDir()) {
		t.Errorf("Dir() = %s, want it under %s", srv.Dir(), os.TempDir())
	}
	if err := srv.CreateDatabase(ctx, "app", ""); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, srv.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	if err := srv.CreateDatabase(ctx, "copy", "app"); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, srv.URL("copy"))
	if err != nil {
		t.Fatal(err)
	}
	var id int
	if err := conn.QueryRow(ctx, "SELECT id FROM t").Scan(&id); err != nil || id != 42 {
		t.Fatalf("template copy: id=%d err=%v", id, err)
	}
	conn.Close(ctx)

	pid, err := srv.postmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(srv.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s still exists after Stop (stat err %v)", srv.Dir(), err)
	}
	if processAlive(pid) {
		t.Errorf("postmaster %d still running after Stop", pid)
	}
	if _, err := pgx.Connect(ctx, srv.URL("app")); err == nil {
		t.Error("connected after Stop")
	}
}

func TestKeepsCallerDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "pgserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	srv, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateDatabase(ctx, "kept", ""); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("caller's dir was not kept: %v", err)
	}

	// The existing cluster is reused, data included.
	srv, err = Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn, err := pgx.Connect(ctx, srv.URL("kept"))
	if err != nil {
		t.Fatalf("database did not survive a restart: %v", err)
	}
	conn.Close(ctx)
}

// TestWatchdogStopsOrphan kills a process that started a server without
// stopping it, the way a test binary dies on a timeout, and expects the
// cluster to go away on its own.
func TestWatchdogStopsOrphan(t *testing.T) {
	if os.Getenv("PGSERVER_ORPHAN_CHILD") == "1" {
		srv, err := Start(context.Background(), Options{})
		if err != nil {
			os.Stdout.WriteString("ERR " + err.Error() + "\n")
			os.Exit(1)
		}
		pid, _ := srv.postmasterPID()
		os.Stdout.WriteString(srv.Dir() + "\n")
		os.Stdout.WriteString(strconv.Itoa(pid) + "\n")
		time.Sleep(time.Hour)
		return
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogStopsOrphan$")
	cmd.Env = append(os.Environ(), "PGSERVER_ORPHAN_CHILD=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	buf := make([]byte, 4096)
	var acc string
	deadline := time.Now().Add(time.Minute)
	for len(lines) < 2 && time.Now().Before(deadline) {
		n, err := stdout.Read(buf)
		acc += string(buf[:n])
		lines = strings.Fields(acc)
		if len(lines) > 0 && lines[0] == "ERR" {
			t.Fatal(acc)
		}
		if err != nil {
			break
		}
	}
	if len(lines) < 2 {
		_ = cmd.Process.Kill()
		t.Fatalf("child did not report its server: %q", acc)
	}
	dir := lines[0]
	pid, _ := strconv.Atoi(lines[1])

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	deadline = time.Now().Add(30 * time.Second)
	for processAlive(pid) || exists(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("orphaned cluster not cleaned up: postmaster %d alive=%v, dir %s exists=%v",
				pid, processAlive(pid), dir, exists(dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestFindBinDir(t *testing.T) {
	dir, err := findBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if !isExecutable(filepath.Join(dir, "initdb")) {
		t.Fatalf("no initdb in %s", dir)
	}
}

func processAlive(pid int) bool {
	// Signal 0 also succeeds on a zombie; a reaped or never-ours process fails.
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Field 3 is the state; Z means it is a zombie waiting for init to reap.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
