// Package pgserver runs a throwaway PostgreSQL cluster from the locally
// installed server binaries, for dev mode and tests. By default it favours
// speed over durability (fsync and friends are off): never point it at data
// you want to keep. Options.Durable keeps PostgreSQL's durable defaults for
// benchmarks and tests that crash the server on purpose.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/devenv/lifeline"
)

// Options configures Start.
type Options struct {
	// Dir holds the cluster (Dir/data), its log (Dir/postgres.log) and its
	// unix socket. Empty means a new directory under os.TempDir that Stop
	// removes. A caller-supplied Dir is kept, and an existing cluster in it
	// is reused, so dev mode can keep its data across restarts.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// MaxConnections is max_connections; 0 means 300, enough for test
	// binaries that open a pool per test.
	MaxConnections int
	// Durable runs PostgreSQL with its durable defaults (fsync,
	// synchronous_commit and full_page_writes on, initdb syncing its files)
	// instead of switching them off: for tests that kill the server
	// (Server.Kill) and count on every committed transaction surviving, as
	// with synchronous_commit off a commit is acknowledged before its WAL
	// leaves shared memory.
	Durable bool
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// Server is a running cluster. Stop it when done; if the process dies
// without doing so (SIGKILL, a test binary's timeout), a lifeline shuts the
// cluster down within moments and removes a temporary directory.
type Server struct {
	dir        string
	removeDir  bool
	dataDir    string
	port       int
	maxConns   int
	durable    bool
	bin        string
	asPostgres bool
	logf       func(string, ...any)
	line       *lifeline.Line

	stopOnce sync.Once
	stopErr  error
}

const superuser = "postgres"

// Start initialises (if needed) and starts a cluster and waits until it
// accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, logf: logf, asPostgres: os.Geteuid() == 0, durable: opts.Durable}

	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "gpuplane-pg-")
		if err != nil {
			return nil, fmt.Errorf("pgserver: create temp dir: %w", err)
		}
		s.dir, s.removeDir = dir, true
	} else {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("pgserver: create %s: %w", dir, err)
		}
		s.dir = dir
	}
	s.dataDir = filepath.Join(s.dir, "data")

	fail := func(err error) (*Server, error) {
		if s.removeDir {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}

	// The unix socket path must fit in sockaddr_un (108 bytes).
	if n := len(filepath.Join(s.dir, ".s.PGSQL.65535")); n > 107 {
		return fail(fmt.Errorf("pgserver: dir %s is too long for a unix socket path (%d > 107 bytes)", s.dir, n))
	}
	if s.asPostgres {
		if err := s.prepareDirForPostgresUser(ctx); err != nil {
			return fail(err)
		}
	}

	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		start := time.Now()
		args := []string{"-D", s.dataDir, "-A", "trust", "-U", superuser, "-E", "UTF8", "--no-locale"}
		if !s.durable {
			args = append(args, "--no-sync")
		}
		if out, err := s.run(ctx, "initdb", args...); err != nil {
			return fail(fmt.Errorf("pgserver: initdb: %w\n%s", err, out))
		}
		logf("pgserver: initdb in %s took %s", s.dataDir, time.Since(start).Round(time.Millisecond))
	} else if err != nil {
		return fail(fmt.Errorf("pgserver: %w", err))
	}

	// Armed before the server starts, so that it covers the start too. The
	// postmaster's PID is read from its pid file when the lifeline fires;
	// SIGQUIT is PostgreSQL's immediate shutdown: nothing here is worth a
	// checkpoint.
	lo := lifeline.Options{Name: "postgres", Signal: "QUIT", Grace: 10 * time.Second,
		PIDFiles: []string{filepath.Join(s.dataDir, "postmaster.pid")}}
	if s.removeDir {
		lo.Remove = []string{s.dir}
	}
	if s.line, err = lifeline.Start(lo); err != nil {
		return fail(err)
	}
	fail = func(err error) (*Server, error) {
		_ = s.line.Release()
		if s.removeDir {
			_ = os.RemoveAll(s.dir)
		}
		return nil, err
	}

	maxConns := opts.MaxConnections
	if maxConns <= 0 {
		maxConns = 300
	}
	s.maxConns = maxConns
	// A free port can be taken by someone else between probing and binding;
	// retry with a fresh one rather than fail a whole test run.
	attempts := 1
	if opts.Port == 0 {
		attempts = 3
	}
	for i := 1; ; i++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return fail(err)
			}
		}
		s.port = port
		err = s.start(ctx, maxConns)
		if err == nil {
			break
		}
		if i >= attempts || ctx.Err() != nil {
			return fail(err)
		}
		logf("pgserver: start on port %d failed, retrying: %v", port, err)
	}

	return s, nil
}

func (s *Server) start(ctx context.Context, maxConns int) error {
	logFile := filepath.Join(s.dir, "postgres.log")
	// pg_ctl hands -o to /bin/sh, hence the shell quoting.
	args := []string{
		"-p", strconv.Itoa(s.port),
		"-k", shellQuote(s.dir),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=" + strconv.Itoa(maxConns),
	}
	if !s.durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	pgOpts := strings.Join(args, " ")
	start := time.Now()
	out, err := s.run(ctx, "pg_ctl", "-D", s.dataDir, "-l", logFile, "-o", pgOpts, "-w", "-t", "60", "start")
	if err != nil {
		tail, _ := os.ReadFile(logFile)
		if len(tail) > 4096 {
			tail = tail[len(tail)-4096:]
		}
		return fmt.Errorf("pgserver: pg_ctl start: %w\n%s\n%s", err, out, tail)
	}
	s.logf("pgserver: postgres on 127.0.0.1:%d (dir %s) started in %s", s.port, s.dir, time.Since(start).Round(time.Millisecond))
	return nil
}

// prepareDirForPostgresUser hands the directory to the postgres user, as
// initdb and postgres refuse to run as root, and checks that postgres can
// actually reach it (a dir under /root, for instance, is not traversable).
func (s *Server) prepareDirForPostgresUser(ctx context.Context) error {
	u, err := user.Lookup(superuser)
	if err != nil {
		return fmt.Errorf("pgserver: running as root needs a %q OS user to run PostgreSQL as: %w", superuser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.WalkDir(s.dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("pgserver: chown %s to %s: %w", s.dir, superuser, err)
	}
	cmd := exec.CommandContext(ctx, "runuser", "-u", superuser, "--", "test", "-w", s.dir, "-a", "-x", s.dir)
	cmd.Dir = "/"
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgserver: user %s cannot write to %s (are all parent directories traversable?): %w", superuser, s.dir, err)
	}
	return nil
}

// run runs one of the PostgreSQL binaries, as the postgres user when we are
// root.
func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if s.asPostgres {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", superuser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	// The caller's working directory may be unreadable for postgres, and
	// initdb fails if it cannot resolve it.
	cmd.Dir = s.dir
	// A terminal's Ctrl-C goes to the whole foreground process group; keep
	// the server out of it so the watchdog or Stop decides how it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// pg_ctl -w waits for the server, but postgres inherits the pipes of a
	// CombinedOutput; give it a file instead so Run returns when pg_ctl does.
	f, err := os.CreateTemp("", "gpuplane-pgctl-*.out")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	runErr := cmd.Run()
	_, _ = f.Seek(0, 0)
	var out bytes.Buffer
	_, _ = out.ReadFrom(f)
	return bytes.TrimSpace(out.Bytes()), runErr
}

func (s *Server) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgserver: read postmaster.pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pgserver: bad postmaster.pid %q", line)
	}
	return pid, nil
}

// Port is the TCP port the server listens on (127.0.0.1).
func (s *Server) Port() int { return s.port }

// Dir is the directory holding the cluster.
func (s *Server) Dir() string { return s.dir }

// URL is a DSN for dbname as the superuser.
func (s *Server) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates database name, copied from template when it is not
// empty.
func (s *Server) CreateDatabase(ctx context.Context, name, template string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("pgserver: create database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down and removes the directory if Start created it.
// It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		// Disarm the lifeline first so it cannot race the orderly stop.
		err := s.line.Release()
		// Without a pid file no server runs (Kill removes it), and pg_ctl
		// would fail to stop nothing.
		if _, statErr := os.Stat(filepath.Join(s.dataDir, "postmaster.pid")); !errors.Is(statErr, os.ErrNotExist) {
			err = errors.Join(err, s.pgCtlStop())
		}
		if s.removeDir {
			if rmErr := os.RemoveAll(s.dir); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("pgserver: remove %s: %w", s.dir, rmErr))
			}
		}
		s.stopErr = err
	})
	return s.stopErr
}

func (s *Server) pgCtlStop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.run(ctx, "pg_ctl", "-D", s.dataDir, "-m", "fast", "-w", "-t", "30", "stop")
	if err == nil {
		return nil
	}
	// Fast shutdown waits for backends to exit; a wedged client must not
	// keep the cluster alive.
	out2, err2 := s.run(ctx, "pg_ctl", "-D", s.dataDir, "-m", "immediate", "-w", "-t", "30", "stop")
	if err2 == nil {
		return nil
	}
	return fmt.Errorf("pgserver: pg_ctl stop: %w\n%s\n%s", err2, out, out2)
}

// findBinDir locates a directory holding initdb, pg_ctl and postgres.
func findBinDir() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	// pg_config may come from libpq-dev alone, without a server next to it.
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
		candidates = append(candidates, dirs...)
	}
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "pg_ctl")) &&
			isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", errors.New("pgserver: no PostgreSQL server binaries found (looked at pg_config --bindir and /usr/lib/postgresql/*/bin): " +
		"install PostgreSQL server binaries (Debian: postgresql) or set DATABASE_URL")
}

func pgMajor(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
