package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/telemetry"
)

// WorkerProcess is `gpuplane worker`: the reconcile worker alone, with its
// metrics (and a liveness probe) on a small HTTP listener.
type WorkerProcess struct {
	cfg     Config
	log     *slog.Logger
	Worker  *reconcile.Worker
	metrics *http.Server
	lis     net.Listener
	feed    *feed
	closers []func()
}

// NewWorker builds the worker and listens on cfg.MetricsAddr (unless
// empty); nothing runs until Run. opts.HostConfig, Logger and
// TracerProvider apply as for New.
func NewWorker(ctx context.Context, cfg Config, opts Options) (_ *WorkerProcess, err error) {
	p := &WorkerProcess{cfg: cfg, log: opts.Logger}
	if p.log == nil {
		p.log = NewLogger(cfg)
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if cfg.DatabaseURL == "" {
		return nil, errors.New("database URL is required (--database-url or DATABASE_URL)")
	}
	tp, closeTracing, err := tracerProvider(ctx, opts, "worker", p.log)
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, closeTracing)
	pool, err := store.Open(ctx, cfg.DatabaseURL, int32(cfg.DatabaseMaxConns), store.WithTracer(telemetry.PGXTracer(tp)))
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	p.closers = append(p.closers, pool.Close)
	rc := opts.HostConfig
	if rc == nil {
		if rc, err = hostConfig(cfg); err != nil {
			return nil, err
		}
	}
	if rc == nil {
		return nil, errors.New("the worker needs a host cluster (--kubeconfig, KUBECONFIG or in-cluster config)")
	}
	hs, err := newHosts(rc, cfg, p.log, tp)
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, hs.close)
	if p.feed, err = newFeed(pool, cfg, p.log, false); err != nil {
		return nil, err
	}
	db := p.feed.db
	reg := newRegistry(db, p.log)
	p.Worker = reconcile.New(db, hs.home, p.log, workerConfig(cfg, hs, reg, tp))
	if cfg.MetricsAddr != "" {
		if p.lis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return nil, fmt.Errorf("listen metrics on %s: %w", cfg.MetricsAddr, err)
		}
		p.metrics = telemetry.NewMetricsServer(reg, p.log)
	}
	return p, nil
}

// workerConfig is the worker's configuration (for serve --run-worker and
// gpuplane worker alike).
func workerConfig(cfg Config, hs hosts, reg prometheus.Registerer, tp trace.TracerProvider) reconcile.Config {
	return reconcile.Config{Concurrency: cfg.WorkerConcurrency, Resync: cfg.ResyncInterval, Metrics: reg, TracerProvider: tp,
		Hosts: reconcile.Registry(hs.registry), HostClusterConcurrency: cfg.HostClusterConcurrency,
		ObserveInterval: cfg.HostClusterProbeInterval, ProvisioningDeadline: cfg.ProvisioningDeadline}
}

// MetricsAddr is the bound metrics address ("" without a listener).
func (p *WorkerProcess) MetricsAddr() string {
	if p.lis == nil {
		return ""
	}
	return p.lis.Addr().String()
}

// Run works until ctx ends; the worker then releases its leases, and the
// metrics listener stops last.
func (p *WorkerProcess) Run(ctx context.Context) error {
	defer p.close()
	errc := make(chan error, 1)
	if p.metrics != nil {
		go func() {
			if err := p.metrics.Serve(p.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		p.log.Info("worker metrics", "addr", p.MetricsAddr())
	}
	p.feed.start(ctx)
	defer p.feed.shutdown()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Worker.Run(wctx) }()
	var err error
	select {
	case err = <-done:
	case err = <-errc:
		cancel()
		if werr := <-done; werr != nil {
			p.log.Warn("worker stopped with an error after the metrics listener failed", "error", werr)
		}
		err = fmt.Errorf("metrics listener: %w", err)
	}
	if p.metrics != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.metrics.Shutdown(sctx)
		scancel()
	}
	return err
}

func (p *WorkerProcess) close() {
	if p.lis != nil { // already closed when the metrics server shut down: harmless
		p.lis.Close()
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}
