// Package storetest gives each test its own freshly migrated PostgreSQL
// database.
//
// The first call in a test binary starts (or connects to) one server and
// builds a template database by running the embedded migrations once; every
// test then gets a cheap CREATE DATABASE ... TEMPLATE copy that is dropped
// when the test ends. Tests may run in parallel.
//
// Packages using it should stop the shared server after their tests:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
//
// The server comes from, in order:
//
//  1. TEST_DATABASE_URL, if set: a server you run (the role needs CREATEDB).
//     The template is kept there between runs, keyed by the migrations'
//     content; per-test databases are dropped.
//  2. testcontainers-go, if a Docker engine answers (image
//     GPUPLANE_TEST_POSTGRES_IMAGE, default postgres:16-alpine).
//  3. Local PostgreSQL server binaries, via internal/devenv/pgserver.
//
// Servers this package starts trade durability for speed, except in a
// binary that runs benchmarks (-test.bench): there they keep PostgreSQL's
// durable defaults, so that what is measured is what production does.
//
// If none works the test fails; it is never skipped.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/gpuplane/gpuplane/internal/devenv/pgserver"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/migrations"
)

const (
	templatePrefix = "gpuplane_template_"
	defaultImage   = "postgres:16-alpine"
	// templateLockKey serialises template builds across test binaries that
	// share a server (go test runs packages in parallel).
	templateLockKey int64 = 0x6770_7570_6c61_6e65 // "gpuplane"
)

type cluster struct {
	source   string
	adminDSN string
	admin    *pgxpool.Pool
	template string
	stop     func() error
}

var (
	mu      sync.Mutex
	shared  *cluster
	initErr error
	done    bool // set by Main; later calls must not start a new server
)

// New returns the DSN of a new database, migrated to the latest embedded
// schema, that is dropped when t ends.
func New(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// NewEmpty is like New but the database has no migrations applied, for
// tests of the migrations themselves.
func NewEmpty(t testing.TB) string {
	t.Helper()
	return newDatabase(t, false)
}

// Pool returns a pool on a database from New, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := store.Open(ctx, dsn, 10)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	// Registered after New's drop, so it runs before it.
	t.Cleanup(pool.Close)
	return pool
}

// Main runs the tests and then stops the shared server, so a test binary
// leaves no PostgreSQL processes or containers behind. Use it as the body
// of TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "storetest: stopping the shared PostgreSQL server: %v\n", err)
		if code == 0 {
			os.Exit(1)
		}
	}
	os.Exit(code)
}

func shutdown() error {
	mu.Lock()
	defer mu.Unlock()
	done = true
	c := shared
	shared = nil
	if c == nil {
		return nil
	}
	c.admin.Close()
	if c.stop != nil {
		return c.stop()
	}
	return nil
}

func getCluster(t testing.TB) *cluster {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if done {
		t.Fatalf("storetest: used after Main shut the server down")
	}
	if shared == nil && initErr == nil {
		shared, initErr = setup()
	}
	if initErr != nil {
		t.Fatalf("storetest: no PostgreSQL for tests: %v", initErr)
	}
	return shared
}

func newDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	c := getCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	name := databaseName(t)
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if migrated {
		stmt += " TEMPLATE " + pgx.Identifier{c.template}.Sanitize()
	}
	if err := execRetryInUse(ctx, c.admin, stmt); err != nil {
		t.Fatalf("storetest: create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE disconnects whatever the test left open (pools it forgot
		// to close, connections of a failed test).
		if _, err := c.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("storetest: drop test database %s: %v", name, err)
		}
	})
	return dsnFor(c.adminDSN, name)
}

// databaseName embeds the test name so a leftover database (from a killed
// run against TEST_DATABASE_URL) can be traced to its test.
func databaseName(t testing.TB) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return "gpt_" + b.String() + "_" + hex.EncodeToString(rnd[:])
}

func setup() (*cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if dsn := os.Getenv("TEST_DATABASE_URL"); dsn != "" {
		c, err := newCluster(ctx, "TEST_DATABASE_URL", dsn, nil)
		if err != nil {
			// The user asked for this server; falling back would hide the
			// misconfiguration.
			return nil, fmt.Errorf("TEST_DATABASE_URL is set but unusable: %w", err)
		}
		return c, nil
	}

	var tried []string
	if err := dockerAnswers(ctx); err != nil {
		tried = append(tried, fmt.Sprintf("testcontainers: no Docker engine (%v)", err))
	} else {
		dsn, stop, err := startContainer(ctx)
		if err == nil {
			c, cerr := newCluster(ctx, "testcontainers", dsn, stop)
			if cerr == nil {
				return c, nil
			}
			_ = stop()
			err = cerr
		}
		tried = append(tried, fmt.Sprintf("testcontainers: %v", err))
	}

	// Benchmarks measure the database as it runs in production: a commit
	// is answered once its WAL is on disk.
	srv, err := pgserver.Start(ctx, pgserver.Options{Durable: benchmarking()})
	if err == nil {
		c, cerr := newCluster(ctx, "local binaries", srv.URL("postgres"), srv.Stop)
		if cerr == nil {
			return c, nil
		}
		_ = srv.Stop()
		err = cerr
	}
	tried = append(tried, fmt.Sprintf("local binaries: %v", err))
	return nil, fmt.Errorf("set TEST_DATABASE_URL, start Docker, or install PostgreSQL server binaries; tried:\n  %s",
		strings.Join(tried, "\n  "))
}

// dockerAnswers is a quick probe so that machines without Docker fall
// through to local binaries in well under a second.
func dockerAnswers(ctx context.Context) (err error) {
	// testcontainers panics in some host-discovery paths when no engine is
	// configured.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err
}

func startContainer(ctx context.Context) (dsn string, stop func() error, err error) {
	image := os.Getenv("GPUPLANE_TEST_POSTGRES_IMAGE")
	if image == "" {
		image = defaultImage
	}
	cmd := []string{"postgres", "-c", "max_connections=300"}
	if !benchmarking() {
		cmd = append(cmd, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	ctr, err := tcpostgres.Run(ctx, image,
		testcontainers.WithCmd(cmd...),
		tcpostgres.BasicWaitStrategies(),
	)
	stop = func() error { return testcontainers.TerminateContainer(ctr) }
	if err != nil {
		_ = stop()
		return "", nil, err
	}
	dsn, err = ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = stop()
		return "", nil, err
	}
	return dsn, stop, nil
}

// benchmarking reports a test binary running benchmarks (-test.bench).
func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

func newCluster(ctx context.Context, source, adminDSN string, stop func() error) (*cluster, error) {
	cfg, err := pgxpool.ParseConfig(adminDSN)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	// CREATE/DROP DATABASE are one-off statements; nothing to prepare.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	c := &cluster{source: source, adminDSN: adminDSN, admin: admin, stop: stop}
	// A server this package started (stop is nil for TEST_DATABASE_URL,
	// someone else's server, whose settings are not ours to change).
	if started := stop != nil; started && benchmarking() {
		if err := preallocateWAL(ctx, admin); err != nil {
			admin.Close()
			return nil, fmt.Errorf("preallocate WAL segments: %w", err)
		}
	}
	if err := c.ensureTemplate(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("build template database: %w", err)
	}
	return c, nil
}

// walSegmentsAhead is how many WAL segments (16 MB each) a benchmark
// server starts with: 1 GB, max_wal_size's default, more than one run of
// the API benchmarks writes between two checkpoints.
const walSegmentsAhead = 64

// preallocateWAL gives a cluster this package just created (initdb) the
// WAL segments a server that has been running has: at each checkpoint
// PostgreSQL renames the segments it no longer needs to future ones
// (recycling, up to min_wal_size and what the last checkpoints used). A
// fresh cluster has none, so every 16 MB of WAL a commit first writes into
// a new file that it zero-fills and syncs, 100-200 ms on a 2-core machine
// under load, while every other commit waits on it: a benchmark would
// measure the first hour of a database's life instead of its steady state.
// (etcd, on the other side of the ratios, preallocates its WAL files in
// the background.) Durability settings are untouched.
func preallocateWAL(ctx context.Context, admin *pgxpool.Pool) error {
	for _, stmt := range []string{
		// Keep what the switches below create through the checkpoints.
		`ALTER SYSTEM SET min_wal_size = '1GB'`,
		`SELECT pg_reload_conf()`,
		`CREATE TABLE gpuplane_wal_preallocation (n int)`,
		// A switch needs WAL written since the last one.
		fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP
			INSERT INTO gpuplane_wal_preallocation VALUES (i); PERFORM pg_switch_wal();
		END LOOP; END $$`, walSegmentsAhead),
		`DROP TABLE gpuplane_wal_preallocation`,
		// The segments switched through are now behind the redo point:
		// recycled as the ones ahead.
		`CHECKPOINT`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", strings.Fields(stmt)[0], err)
		}
	}
	return nil
}

// ensureTemplate makes sure a template database migrated with the current
// embedded migrations exists. Its name carries a hash of the migrations, so
// a persistent server (TEST_DATABASE_URL) keeps reusing it until the SQL
// changes. ALLOW_CONNECTIONS false marks it complete (a build that died
// halfway leaves it true) and keeps stray sessions out, which would
// otherwise make CREATE DATABASE ... TEMPLATE fail.
func (c *cluster) ensureTemplate(ctx context.Context) error {
	hash, err := migrationsHash()
	if err != nil {
		return err
	}
	c.template = templatePrefix + hash
	ident := pgx.Identifier{c.template}.Sanitize()

	conn, err := c.admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockKey)
	}()

	var allowConn bool
	err = conn.QueryRow(ctx, "SELECT datallowconn FROM pg_database WHERE datname = $1", c.template).Scan(&allowConn)
	switch {
	case err == nil && !allowConn:
		c.pruneTemplates(ctx, conn)
		return nil
	case err == nil:
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop incomplete template: %w", err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}

	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return err
	}
	if err := store.MigrateUp(ctx, dsnFor(c.adminDSN, c.template)); err != nil {
		return err
	}
	// Terminating needs superuser or the same role; where it is refused,
	// execRetryInUse still waits out sessions that are closing anyway.
	_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", c.template)
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS false"); err != nil {
		return err
	}
	c.pruneTemplates(ctx, conn)
	return nil
}

// pruneTemplates drops templates of older migration sets so a long-lived
// server does not collect one per schema edit. Best effort: one in use by
// another test binary stays.
func (c *cluster) pruneTemplates(ctx context.Context, conn *pgxpool.Conn) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1) AND datname <> $2",
		templatePrefix, c.template)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize())
	}
}

var migrationsHash = sync.OnceValues(func() (string, error) {
	var names []string
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, path)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
})

// execRetryInUse retries stmt while PostgreSQL reports the source database
// busy (55006), which happens for a moment after the template's last
// session disconnects.
func execRetryInUse(ctx context.Context, pool *pgxpool.Pool, stmt string) error {
	delay := 10 * time.Millisecond
	for {
		_, err := pool.Exec(ctx, stmt)
		if err == nil || store.SQLState(err) != pgerrcode.ObjectInUse {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// dsnFor points dsn (URL or keyword/value) at database name.
func dsnFor(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		u.RawPath = ""
		return u.String()
	}
	// In keyword/value form the last occurrence of a keyword wins.
	return dsn + " dbname='" + name + "'"
}
