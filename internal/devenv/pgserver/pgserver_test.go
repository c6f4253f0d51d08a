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

func showSettings(ctx context.Context, t *testing.T, dsn string) map[string]string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	got := map[string]string{}
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
		var v string
		if err := conn.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		got[name] = v
	}
	return got
}

// TestSettings: the default server trades durability for speed; a Durable
// one keeps PostgreSQL's durable defaults.
func TestSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		durable bool
		want    string
	}{{false, "off"}, {true, "on"}} {
		srv, err := Start(ctx, Options{Durable: tc.durable, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range showSettings(ctx, t, srv.URL("postgres")) {
			if v != tc.want {
				t.Errorf("Durable=%v: %s = %s, want %s", tc.durable, name, v, tc.want)
			}
		}
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKillThenResume crashes a durable server with SIGKILL and starts it
// again on the same directory: every process of the old server is gone
// after Kill, the new one runs crash recovery, committed rows are back and
// a transaction that was open at the crash is not.
func TestKillThenResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := Start(ctx, Options{Durable: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if err := srv.CreateDatabase(ctx, "app", ""); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, srv.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	const committed = 100
	for i := range committed {
		if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
	}
	open, err := pgx.Connect(ctx, srv.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Exec(ctx, "BEGIN; INSERT INTO t VALUES (-1)"); err != nil {
		t.Fatal(err)
	}

	pid, err := srv.postmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	kids := childrenOf(pid)
	if len(kids) < 2 { // at least the two client backends
		t.Fatalf("postmaster %d has children %v, want its backends and helpers", pid, kids)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]int{pid}, kids...) {
		if processAlive(p) {
			t.Errorf("process %d of the killed server still running", p)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a connection to the killed server still answers")
	}
	conn.Close(ctx)
	open.Close(ctx)

	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(srv.Dir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	// What PostgreSQL logs when the last shutdown was no shutdown at all.
	if !strings.Contains(string(log), "automatic recovery in progress") {
		t.Errorf("no crash recovery in the log after Kill:\n%s", log)
	}
	conn, err = pgx.Connect(ctx, srv.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	var n, uncommitted int
	if err := conn.QueryRow(ctx, "SELECT count(*) FILTER (WHERE id >= 0), count(*) FILTER (WHERE id < 0) FROM t").Scan(&n, &uncommitted); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if n != committed || uncommitted != 0 {
		t.Errorf("after crash recovery: %d committed rows (want %d), %d uncommitted (want 0)", n, committed, uncommitted)
	}

	// Stop after a Kill has nothing to shut down, and still cleans up.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop after Kill: %v", err)
	}
	if exists(srv.Dir()) {
		t.Errorf("dir %s still exists after Stop", srv.Dir())
	}
}
