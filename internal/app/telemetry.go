package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/telemetry"
)

// tracerProvider is opts.TracerProvider (tests) or the one the OTEL_*
// environment asks for (none by default). close flushes buffered spans.
func tracerProvider(ctx context.Context, opts Options, component string, log *slog.Logger) (tp trace.TracerProvider, close func(), err error) {
	if opts.TracerProvider != nil {
		return opts.TracerProvider, func() {}, nil
	}
	tp, shutdown, err := telemetry.NewTracerProvider(ctx, component, log)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	if telemetry.ExportEnabled() {
		log.Info("exporting traces over OTLP (OTEL_* environment)")
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flushing traces failed", "error", err)
		}
	}, nil
}

// newRegistry is the /metrics registry: Go runtime and process metrics,
// plus the reconcile queue read from the database at scrape time.
func newRegistry(pool *pgxpool.Pool, log *slog.Logger) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		reconcile.NewQueueCollector(pool, log))
	return reg
}
