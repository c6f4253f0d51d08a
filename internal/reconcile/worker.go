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

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Host is what the worker needs from the host cluster; *hostcluster.Client
// implements it.
type Host interface {
	Apply(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Steps, error)
	Observe(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Observed, error)
	Delete(ctx context.Context, vc hostcluster.VirtualCluster) error
}

// DefaultProvisioningDeadline is Config.ProvisioningDeadline's default: a
// vCluster control plane starts in a minute or two when its image is
// cached; ten minutes leaves room for a pull.
const DefaultProvisioningDeadline = 10 * time.Minute

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
	// ProvisioningDeadline is how long a virtual cluster may stay not
	// ready (its control plane never starting, say) before it is DEGRADED,
	// with what it waits for as the reason; the worker keeps looking, and
	// it becomes READY when it gets there.
	ProvisioningDeadline time.Duration
	// BackoffBase and BackoffMax bound retry delays.
	BackoffBase, BackoffMax time.Duration
	// Metrics, when set, gets the worker's Prometheus metrics (metrics.go);
	// `serve --run-worker` passes the API server's registry.
	Metrics prometheus.Registerer
	// TracerProvider traces each reconcile job and its host-cluster steps;
	// nil traces nothing.
	TracerProvider trace.TracerProvider
	// Hosts reaches the host clusters with a kubeconfig Secret; the Host
	// given to New is the one gpuplane runs in. nil: only that one.
	Hosts Hosts
	// HostClusterConcurrency is the most reconciles one host cluster may
	// have at once; 0: Concurrency with one host cluster, half of it
	// (at least one) with more.
	HostClusterConcurrency int
	// ObserveInterval is how often every host cluster is probed (health,
	// versions, capacity); 0 means 15s.
	ObserveInterval time.Duration
	// ProbeTimeout bounds one host cluster's probe; 0 means 10s.
	ProbeTimeout time.Duration
	// HostDownRetry is how soon a virtual cluster whose host cluster is
	// down is looked at again (the observer queues it as soon as the host
	// cluster answers); 0 means 30s.
	HostDownRetry time.Duration
	// Now is the worker's clock for observations; nil is time.Now.
	Now func() time.Time
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
	if c.ProvisioningDeadline <= 0 {
		c.ProvisioningDeadline = DefaultProvisioningDeadline
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Minute
	}
	if c.ObserveInterval <= 0 {
		c.ObserveInterval = 15 * time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 10 * time.Second
	}
	if c.HostDownRetry <= 0 {
		c.HostDownRetry = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Worker consumes the reconcile queue (internal/workqueue).
type Worker struct {
	DB *store.DB
	// Host reaches the host cluster gpuplane runs in (instrumented); nil
	// when there is none (every host cluster has a kubeconfig Secret).
	Host Host
	Log  *slog.Logger
	cfg  Config
	// inCluster is Host as given to New.
	inCluster Host
	slots     slots
	// beforeStep, when set (tests), runs before each step of a reconcile.
	beforeStep func(step string)
	tel        *workerTelemetry
}

// New builds a worker.
func New(db *store.DB, host Host, log *slog.Logger, cfg Config) *Worker {
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{DB: db, Host: host, Log: log, cfg: cfg.withDefaults(), inCluster: host, slots: slots{inFlight: map[string]int{}}}
	w.tel = newWorkerTelemetry(cfg.Metrics, cfg.TracerProvider)
	w.Host = instrumentHost(host, w.tel)
	return w
}

// claim is one leased work item; the reconcile's span continues the trace
// of the change that enqueued it (TraceParent).
type claim struct {
	workqueue.Claim
	// generation is the one the reconcile set out to converge on (0 until
	// the virtual cluster was read).
	generation int64
}

// Run works until ctx ends. In-flight reconciles get ctx's cancellation;
// their leases are released (not left to expire) when they stop.
func (w *Worker) Run(ctx context.Context) error {
	w.Log.Info("worker started", "id", w.cfg.ID, "concurrency", w.cfg.Concurrency)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.resyncLoop(ctx) }()
	go func() { defer wg.Done(); w.observeLoop(ctx) }()
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
			w.slots.take(c.HostCluster)
			go func(c claim) {
				defer wg.Done()
				defer func() {
					w.slots.give(c.HostCluster)
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
	cutoff, err := workqueue.Now(ctx, w.DB)
	if err != nil {
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

// claimDue leases up to n due items, at most perCluster of one host
// cluster counting those in flight; with a cutoff, only items due at or
// before it.
func (w *Worker) claimDue(ctx context.Context, n int, cutoff *time.Time) ([]claim, error) {
	per := w.perCluster()
	claims, err := workqueue.ClaimDue(ctx, w.DB, w.cfg.ID, w.cfg.Lease, n, cutoff, per, w.busy(per))
	out := make([]claim, len(claims))
	for i, c := range claims {
		out[i] = claim{Claim: c}
	}
	return out, err
}

// releaseAll gives back this worker's leases on shutdown so another worker
// takes over at once instead of after the lease expires.
func (w *Worker) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := workqueue.ReleaseAll(ctx, w.DB, w.cfg.ID); err != nil {
		w.Log.Warn("releasing leases failed; they expire by themselves", "error", err)
	}
}

// done finishes a claim (workqueue.Done).
func (w *Worker) done(ctx context.Context, c claim) error { return workqueue.Done(ctx, w.DB, c.Claim) }

// later puts the claim back to run after d; attempts are kept only when
// the reason is a failure.
func (w *Worker) later(ctx context.Context, c claim, d time.Duration, failure error) error {
	msg := ""
	if failure != nil {
		msg = truncate(failure.Error(), 2000)
	}
	return workqueue.Later(ctx, w.DB, c.Claim, d, msg, failure != nil)
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
			if _, err := workqueue.Resync(ctx, w.DB); err != nil && ctx.Err() == nil {
				w.Log.Warn("resync failed", "error", err)
			}
		}
	}
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
				if err := workqueue.Renew(ctx, w.DB, c.Claim, w.cfg.ID, w.cfg.Lease); err != nil && ctx.Err() == nil {
					w.Log.Warn("renewing a lease failed", "virtual_cluster", c.VirtualCluster, "error", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
