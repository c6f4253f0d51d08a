package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Halt stops the server as an operator's restart does (fast shutdown:
// clients are disconnected, committed transactions are on disk after the
// shutdown checkpoint) and keeps its data; Resume starts it again. Fault
// tests use the pair to restart the database under load.
func (s *Server) Halt() error { return s.pgCtlStop() }

// Resume starts a halted or killed server again on the same port and
// directory and waits until it accepts connections; after Kill that
// includes crash recovery (replaying the WAL since the last checkpoint).
func (s *Server) Resume(ctx context.Context) error { return s.start(ctx, s.maxConns) }

// Kill crashes the server as far as a process can be crashed: the
// postmaster and every process it forked get SIGKILL, so there is no
// shutdown checkpoint and whatever sat in shared memory (WAL not yet
// written, dirty pages) is gone. It returns once all of them are dead.
// The data directory stays for Resume. What PostgreSQL had handed to the
// kernel survives, as the kernel does: this is a database crash, not a
// power cut.
func (s *Server) Kill() error {
	pid, err := s.postmasterPID()
	if err != nil {
		return err
	}
	// Backends start sessions of their own, so the postmaster's process
	// group does not reach them. Stopping the postmaster first keeps it from
	// forking while its children are listed.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgserver: stop postmaster %d: %w", pid, err)
	}
	if err := waitFor(5*time.Second, func() bool { st, _ := procState(pid); return st == 'T' || st == 0 }); err != nil {
		return fmt.Errorf("pgserver: postmaster %d did not stop: %w", pid, err)
	}
	procs := append([]int{pid}, childrenOf(pid)...)
	for _, p := range procs {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgserver: kill %d: %w", p, err)
		}
	}
	err = waitFor(10*time.Second, func() bool {
		for _, p := range procs {
			if st, _ := procState(p); st != 0 && st != 'Z' {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("pgserver: postgres processes %v still running after SIGKILL: %w", procs, err)
	}
	// The dead postmaster stays a zombie until init reaps it (seconds in
	// some containers, never in others), and PostgreSQL refuses to start
	// while a lock file names a PID that kill(2) still finds. Every process
	// is dead, so the lock files are stale: remove them, as a reboot
	// would make them stale by emptying the process table.
	for _, f := range []string{filepath.Join(s.dataDir, "postmaster.pid"),
		filepath.Join(s.dir, ".s.PGSQL."+strconv.Itoa(s.port)+".lock")} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	s.logf("pgserver: killed postmaster %d and %d children", pid, len(procs)-1)
	return nil
}

// procState is the state letter from /proc/pid/stat (R, S, D, T, Z, ...),
// or 0 when there is no such process.
func procState(pid int) (byte, int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its closing parenthesis are state, ppid, ...
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return f[0][0], ppid
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid := procState(p); ppid == pid && st != 'Z' {
			kids = append(kids, p)
		}
	}
	return kids
}

func waitFor(limit time.Duration, done func() bool) error {
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s", limit)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
