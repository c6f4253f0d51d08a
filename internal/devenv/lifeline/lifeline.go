// Package lifeline makes the processes dev mode and tests start (PostgreSQL,
// etcd, kube-apiserver) die with the process that started them, however it
// dies: a SIGKILL, an OOM kill or a test binary's timeout run no Go code,
// so no deferred Stop can help.
//
// How: Start launches a small watchdog (/bin/sh) in its own process group.
// Its stdin is the read end of a pipe whose only write end this process
// holds (close-on-exec, so no other child inherits it). The kernel closes
// that end when this process exits for any reason; the watchdog reads EOF
// and then signals the watched processes, escalates to SIGKILL after a grace
// period, waits until they are gone and removes their directories. An
// orderly shutdown writes "release" first, and the watchdog exits without
// touching anything.
//
// Why not Pdeathsig (prctl PR_SET_PDEATHSIG): it fires when the *thread*
// that forked the child exits, and Go may end threads (a goroutine that
// exits while locked to its thread takes the thread with it), killing
// children of a process that is alive; it is Linux-only; and it reaches only
// direct children, not the PostgreSQL server that pg_ctl daemonises, nor
// processes started by libraries such as controller-runtime's envtest,
// whose exec.Cmd we cannot configure. A polling watchdog would work too but
// reacts a poll interval late; the pipe reacts at once.
//
// Processes are named by PID, which the kernel may reuse once a process is
// gone. So each PID is recorded with the executable it runs, and the
// watchdog signals only a PID that still runs that executable (checked
// through /proc where there is one). Wrap gives a library-started process a
// recording wrapper, so it is watched from its first instruction, not from
// whenever the library returns.
package lifeline

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure Start.
type Options struct {
	// Name shows in the watchdog's command line (ps), e.g. "envtest".
	Name string
	// Signal is sent first: "TERM" when empty; "QUIT" is PostgreSQL's
	// immediate shutdown; "KILL" for state that is thrown away anyway.
	Signal string
	// Grace is how long the processes get after Signal before SIGKILL;
	// 5s when zero.
	Grace time.Duration
	// PIDFiles are files whose first line is a PID, read when the watchdog
	// fires (PostgreSQL's postmaster.pid): for a daemon whose PID is only
	// known once it has started. That process alone is signalled, not its
	// group.
	PIDFiles []string
	// Remove are directories deleted once the processes are gone.
	Remove []string
}

// Line is an armed watchdog. Release it on an orderly stop.
type Line struct {
	dir    string
	w      *os.File
	cmd    *exec.Cmd
	exited chan struct{}

	mu   sync.Mutex
	done bool
}

// live keeps armed lines reachable: if a Line were garbage collected, its
// pipe's finalizer would close the write end and fire the watchdog while
// the processes are still in use.
var live sync.Map

// The watchdog. $1 state dir, $2 signal, $3 grace in tenths of a second,
// then PID files. $1/pids holds "PID EXE" lines, $1/remove directories.
const watchdog = `trap '' HUP INT
dir=$1 sig=$2 grace=$3
shift 3
IFS= read -r cmd
if [ "$cmd" = release ]; then rm -rf "$dir"; exit 0; fi
running() { # pid [exe]: alive, not a zombie, and running exe when given
	kill -0 "$1" 2>/dev/null || return 1
	[ -r "/proc/$1/stat" ] || return 0
	[ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ] || return 1
	[ -z "$2" ] || [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$2" ]
}
groups= pids=
if [ -f "$dir/pids" ]; then
	while read -r pid exe; do
		case $pid in ''|*[!0-9]*) continue ;; esac
		running "$pid" "$exe" || continue
		groups="$groups $pid"
	done < "$dir/pids"
fi
for f in "$@"; do
	[ -r "$f" ] || continue
	IFS= read -r pid < "$f" || true
	case $pid in ''|*[!0-9]*) continue ;; esac
	pids="$pids $pid"
done
signal() {
	for p in $groups; do kill -s "$1" -- "-$p" 2>/dev/null || kill -s "$1" "$p" 2>/dev/null; done
	for p in $pids; do kill -s "$1" "$p" 2>/dev/null; done
}
anyrunning() {
	for p in $groups $pids; do running "$p" && return 0; done
	return 1
}
signal "$sig"
i=0
while anyrunning && [ "$i" -lt "$grace" ]; do sleep 0.1; i=$((i+1)); done
if anyrunning; then
	signal KILL
	i=0
	while anyrunning && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i+1)); done
fi
if [ -f "$dir/remove" ]; then
	while IFS= read -r d; do [ -n "$d" ] && rm -rf "$d"; done < "$dir/remove"
fi
rm -rf "$dir"
`

// Start arms a watchdog. It holds no processes yet: add them with Watch or
// Wrap, or name them in Options.PIDFiles.
func Start(o Options) (*Line, error) {
	if o.Signal == "" {
		o.Signal = "TERM"
	}
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	if o.Name == "" {
		o.Name = "children"
	}
	dir, err := os.MkdirTemp("", "gpuplane-lifeline-")
	if err != nil {
		return nil, fmt.Errorf("lifeline: %w", err)
	}
	l := &Line{dir: dir, exited: make(chan struct{})}
	for _, d := range o.Remove {
		if err := l.RemoveOnExit(d); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("lifeline: pipe: %w", err)
	}
	args := append([]string{"-c", watchdog, "gpuplane-lifeline-" + o.Name, dir, o.Signal,
		strconv.Itoa(int(o.Grace / (100 * time.Millisecond)))}, o.PIDFiles...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdin = r
	cmd.Dir = "/"
	// Its own process group: a terminal's Ctrl-C must not kill the
	// watchdog before the orderly shutdown releases it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("lifeline: start watchdog: %w", err)
	}
	r.Close()
	l.w, l.cmd = w, cmd
	go func() {
		_ = cmd.Wait()
		close(l.exited)
	}()
	live.Store(l, struct{}{})
	return l, nil
}

// Watch adds a running process, by PID and the executable it runs.
func (l *Line) Watch(pid int, executable string) error {
	exe, err := resolve(executable)
	if err != nil {
		return err
	}
	return l.appendLine("pids", strconv.Itoa(pid)+" "+exe)
}

// RemoveOnExit adds a directory the watchdog deletes after the processes
// are gone.
func (l *Line) RemoveOnExit(dir string) error {
	if dir == "" || strings.ContainsAny(dir, "\n\r") {
		return fmt.Errorf("lifeline: cannot remove %q", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("lifeline: %w", err)
	}
	return l.appendLine("remove", abs)
}

// Wrap returns the path of an executable script that records its own PID
// in the line and then execs binary with the same arguments, so a process
// someone else starts (envtest) is watched from its start. Runs with -h,
// --help or --version as the first argument are not recorded: they end by
// themselves, and a recorded PID that ended early could be reused.
func (l *Line) Wrap(binary string) (string, error) {
	exe, err := resolve(binary)
	if err != nil {
		return "", err
	}
	script := "#!/bin/sh\n" +
		"# Written by gpuplane's lifeline: records this process, then runs " + filepath.Base(exe) + ".\n" +
		"case \"$1\" in -h|--help|--version) ;; *) echo \"$$ \"" + shellQuote(exe) + " >> " + shellQuote(filepath.Join(l.dir, "pids")) + " ;; esac\n" +
		"exec " + shellQuote(exe) + " \"$@\"\n"
	path := filepath.Join(l.dir, "wrap-"+filepath.Base(exe))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("lifeline: write wrapper: %w", err)
	}
	return path, nil
}

// Release disarms the watchdog after an orderly stop: it exits without
// signalling anything. Safe to call more than once.
func (l *Line) Release() error { return l.finish("release\n") }

// Cut fires the watchdog now, as if this process had died, and waits until
// it is done: the fallback when an orderly stop failed.
func (l *Line) Cut() error { return l.finish("") }

func (l *Line) finish(msg string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return nil
	}
	l.done = true
	defer live.Delete(l)
	var err error
	if msg != "" {
		_, err = l.w.WriteString(msg)
	}
	err = errors.Join(err, l.w.Close())
	select {
	case <-l.exited:
	case <-time.After(30 * time.Second):
		err = errors.Join(err, errors.New("lifeline: watchdog did not exit"))
	}
	return errors.Join(err, os.RemoveAll(l.dir))
}

func (l *Line) appendLine(file, line string) error {
	f, err := os.OpenFile(filepath.Join(l.dir, file), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("lifeline: %w", err)
	}
	_, werr := f.WriteString(line + "\n")
	return errors.Join(werr, f.Close())
}

// resolve returns the absolute, symlink-free path /proc/PID/exe will show.
func resolve(binary string) (string, error) {
	abs, err := filepath.Abs(binary)
	if err != nil {
		return "", fmt.Errorf("lifeline: %w", err)
	}
	exe, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("lifeline: %w", err)
	}
	if strings.ContainsAny(exe, "\n\r") {
		return "", fmt.Errorf("lifeline: cannot watch %q (newline in the path)", exe)
	}
	return exe, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
