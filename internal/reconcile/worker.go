package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
)

// Host is what the worker needs from the host cluster; *hostcluster.Client
// implements it.
type Host interface {
	Apply(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Steps, error)
	Observe(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Observed, error)
	Delete(ctx context.Context, vc hostcluster.VirtualCluster) error
}

// Config tunes the worker.
type Config struct {
	// ID names this worker in leases; defaults to hostname-pid.
	ID string
	// Concurrency is how many virtual clusters are reconciled at once.
	Concurrency int
	// Lease is how long a claim lasts; a worker that dies releases its
	// claims when they expire.
	Lease time.Duration
	// Poll is how often the queue is checked when idle, and how soon a
	// virtual cluster whose control plane is still starting is looked at again.
	Poll time.Duration
	// Resync re-enqueues every live virtual cluster this often (drift repair).
	Resync time.Duration
	// MaxAttempts before a virtual cluster is marked FAILED.
	MaxAttempts int
	// BackoffBase and BackoffMax bound retry delays.
	BackoffBase, BackoffMax time.Duration
	// Metrics, when set, gets the worker's Prometheus metrics (metrics.go);
	// `serve --run-worker` passes the API server's registry.
	Metrics prometheus.Registerer
	// TracerProvider traces each reconcile job and its host-cluster steps;
	// nil traces nothing.
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Minute
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Resync <= 0 {
		c.Resync = 5 * time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 8
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Minute
	}
	return c
}

// Worker consumes the reconcile queue.
type Worker struct {
	Pool *pgxpool.Pool
	Host Host
	Log  *slog.Logger
	cfg  Config
	// beforeStep, when set (tests), runs before each step of a reconcile.
	beforeStep func(step string)
	tel        *workerTelemetry
}

// New builds a worker.
func New(pool *pgxpool.Pool, host Host, log *slog.Logger, cfg Config) *Worker {
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{Pool: pool, Host: host, Log: log, cfg: cfg.withDefaults()}
	w.tel = newWorkerTelemetry(cfg.Metrics, cfg.TracerProvider)
	w.Host = instrumentHost(host, w.tel)
	return w
}

// claim is one leased work item.
type claim struct {
	vcID     string
	attempts int
	enqueued time.Time
	// traceParent is the W3C traceparent of the change that enqueued the
	// work ("" when untraced); the reconcile's span continues its trace.
	traceParent string
	// generation is the one the reconcile set out to converge on (0 until
	// the virtual cluster was read).
	generation int64
}

// Run works until ctx ends. In-flight reconciles get ctx's cancellation;
// their leases are released (not left to expire) when they stop.
func (w *Worker) Run(ctx context.Context) error {
	w.Log.Info("worker started", "id", w.cfg.ID, "concurrency", w.cfg.Concurrency)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.resyncLoop(ctx) }()
	sem := make(chan struct{}, w.cfg.Concurrency)
	// freed wakes the loop when a slot frees up, so a busy worker claims the
	// next item at once instead of idling the slot until the next tick.
	freed := make(chan struct{}, 1)
	ticker := time.NewTicker(w.cfg.Poll)
	defer ticker.Stop()
	for ctx.Err() == nil {
		free := w.cfg.Concurrency - len(sem)
		claims, err := w.claimDue(ctx, free, nil)
		if err != nil && ctx.Err() == nil {
			w.Log.Warn("claiming work failed", "error", err)
		}
		for _, c := range claims {
			sem <- struct{}{}
			wg.Add(1)
			go func(c claim) {
				defer wg.Done()
				defer func() {
					<-sem
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
				w.process(ctx, c)
			}(c)
		}
		if len(claims) > 0 && len(claims) == free {
			continue // there may be more
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		case <-freed: // one claim per finished reconcile: no busy loop
		}
	}
	wg.Wait()
	w.releaseAll()
	w.Log.Info("worker stopped", "id", w.cfg.ID)
	return nil
}

// RunOnce processes everything due now and returns (tests, benchmarks).
//
// Only work due when it starts is taken: a virtual cluster put back to be
// looked at again later (its control plane is still starting) waits for the
// next RunOnce, so RunOnce returns even when a reconcile takes longer than
// the poll interval.
func (w *Worker) RunOnce(ctx context.Context) (int, error) {
	var cutoff time.Time
	if err := w.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&cutoff); err != nil {
		return 0, err
	}
	n := 0
	for {
		claims, err := w.claimDue(ctx, w.cfg.Concurrency, &cutoff)
		if err != nil || len(claims) == 0 {
			return n, err
		}
		var wg sync.WaitGroup
		for _, c := range claims {
			wg.Add(1)
			go func(c claim) { defer wg.Done(); w.process(ctx, c) }(c)
		}
		wg.Wait()
		n += len(claims)
	}
}

// claimDue leases up to n due items; with a cutoff, only items due at or
// before it.
func (w *Worker) claimDue(ctx context.Context, n int, cutoff *time.Time) ([]claim, error) {
	if n <= 0 {
		return nil, nil
	}
	rows, err := w.Pool.Query(ctx, `
		UPDATE reconcile_work w SET lease_owner = $1, lease_expire_time = clock_timestamp() + $2::interval,
		       attempts = w.attempts + 1
		 WHERE w.virtual_cluster_id IN (
		       SELECT virtual_cluster_id FROM reconcile_work
		        WHERE run_after <= COALESCE($4::timestamptz, clock_timestamp())
		          AND (lease_expire_time IS NULL OR lease_expire_time < clock_timestamp())
		        ORDER BY run_after
		        LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING w.virtual_cluster_id, w.attempts, w.enqueue_time, COALESCE(w.trace_parent, '')`, w.cfg.ID, w.cfg.Lease.String(), n, cutoff)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (claim, error) {
		var c claim
		return c, r.Scan(&c.vcID, &c.attempts, &c.enqueued, &c.traceParent)
	})
}

// releaseAll gives back this worker's leases on shutdown so another worker
// takes over at once instead of after the lease expires.
func (w *Worker) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.Pool.Exec(ctx, `UPDATE reconcile_work SET lease_owner = '', lease_expire_time = NULL,
		attempts = GREATEST(attempts - 1, 0) WHERE lease_owner = $1`, w.cfg.ID); err != nil {
		w.Log.Warn("releasing leases failed; they expire by themselves", "error", err)
	}
}

// done finishes a claim: the row goes away unless the virtual cluster was
// enqueued again while we worked (enqueue_time moved), in which case it
// stays, due now, unleased.
func (w *Worker) done(ctx context.Context, c claim) error {
	if _, err := w.Pool.Exec(ctx, `DELETE FROM reconcile_work WHERE virtual_cluster_id = $1 AND enqueue_time = $2`, c.vcID, c.enqueued); err != nil {
		return err
	}
	_, err := w.Pool.Exec(ctx, `UPDATE reconcile_work SET lease_owner = '', lease_expire_time = NULL, attempts = 0
		WHERE virtual_cluster_id = $1`, c.vcID)
	return err
}

// later puts the claim back to run after d; attempts are kept only when
// the reason is a failure.
func (w *Worker) later(ctx context.Context, c claim, d time.Duration, failure error) error {
	msg := ""
	keep := 0
	if failure != nil {
		msg = truncate(failure.Error(), 2000)
		keep = 1
	}
	_, err := w.Pool.Exec(ctx, `UPDATE reconcile_work SET lease_owner = '', lease_expire_time = NULL,
		run_after = CASE WHEN enqueue_time = $2 THEN clock_timestamp() + $3::interval ELSE clock_timestamp() END,
		attempts = CASE WHEN $4 = 1 AND enqueue_time = $2 THEN attempts ELSE 0 END, last_error = $5
		WHERE virtual_cluster_id = $1`, c.vcID, c.enqueued, d.String(), keep, msg)
	return err
}

func (w *Worker) backoff(attempts int) time.Duration {
	d := w.cfg.BackoffBase << min(attempts-1, 20)
	if d > w.cfg.BackoffMax || d <= 0 {
		d = w.cfg.BackoffMax
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func (w *Worker) resyncLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := Resync(ctx, w.Pool); err != nil && ctx.Err() == nil {
				w.Log.Warn("resync failed", "error", err)
			}
		}
	}
}

// Resync queues every live virtual cluster for a reconcile that repairs
// drift. Queued ones keep their place. Safe from several workers at once.
func Resync(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	tag, err := pool.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id)
		SELECT id FROM virtual_clusters WHERE phase IN ('PROVISIONING', 'READY', 'DEGRADED')
		ON CONFLICT (virtual_cluster_id) DO NOTHING`)
	return tag.RowsAffected(), err
}

// permanent errors are not retried: the same input fails the same way.
func permanent(err error) bool {
	var ve *hostcluster.ValuesError
	if errors.As(err, &ve) {
		return true
	}
	return errs.KindOf(err) == errs.KindInvalidArgument
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// renewLease extends the claim while a reconcile runs (a Helm operation on
// a slow cluster can outlast one lease), so no other worker starts the same
// virtual cluster meanwhile. A worker that dies stops renewing and its
// claim expires within one lease.
func (w *Worker) renewLease(ctx context.Context, c claim) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := w.Pool.Exec(ctx, `UPDATE reconcile_work SET lease_expire_time = clock_timestamp() + $3::interval
					WHERE virtual_cluster_id = $1 AND lease_owner = $2`, c.vcID, w.cfg.ID, w.cfg.Lease.String()); err != nil && ctx.Err() == nil {
					w.Log.Warn("renewing a lease failed", "virtual_cluster", c.vcID, "error", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
