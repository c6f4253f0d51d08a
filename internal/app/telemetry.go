package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/telemetry"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// tracerProvider is opts.TracerProvider (tests) or the one the OTEL_*
// environment asks for (none by default). close flushes buffered spans.
func tracerProvider(ctx context.Context, opts Options, component string, log *slog.Logger) (tp trace.TracerProvider, closeFn func(), err error) {
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
func newRegistry(db *store.DB, log *slog.Logger) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		reconcile.NewQueueCollector(db, log))
	return reg
}

// groupCommitCollectors report store.GroupStats (serve only: the API's
// changes are what group commit batches): members per batch is how
// many changes of one department share a lock and a WAL flush, and round
// trips per member the serial part of each change's cost under that lock.
func groupCommitCollectors(db *store.DB) []prometheus.Collector {
	counter := func(name, help string, v func(store.GroupStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(db.GroupStats())) })
	}
	return []prometheus.Collector{
		counter("gpuplane_store_group_batches_total",
			"Group-commit transactions run: each carries the changes queued meanwhile for one department.",
			func(s store.GroupStats) uint64 { return s.Batches }),
		counter("gpuplane_store_group_members_total",
			"Changes run in group-commit transactions (divided by the batches: the batch size).",
			func(s store.GroupStats) uint64 { return s.Members }),
		counter("gpuplane_store_group_round_trips_total",
			"Round trips to PostgreSQL of group-commit transactions, BEGIN to COMMIT, retries included.",
			func(s store.GroupStats) uint64 { return s.RoundTrips }),
		counter("gpuplane_store_group_set_flushes_total",
			"Group-commit transactions that wrote all their members' last writes in one statement per kind of write.",
			func(s store.GroupStats) uint64 { return s.SetFlushes }),
		counter("gpuplane_store_group_set_fallbacks_total",
			"Group-commit transactions whose one-statement writes failed and were undone, each member's writes then sent on their own.",
			func(s store.GroupStats) uint64 { return s.SetFallbacks }),
	}
}

// stateCollectors are the scrape-time gauges about what the database holds:
// virtual clusters per phase, requests per state, and per-team quota and
// allocation. Each is one query, owned by the table's repository; every
// phase and state is reported, zero included, so a series does not vanish
// when its count drops to nothing.
func stateCollectors(db *store.DB, log *slog.Logger) []prometheus.Collector {
	vcs := prometheus.NewDesc("gpuplane_virtual_clusters", "Virtual clusters by phase.", []string{"phase"}, nil)
	reqs := prometheus.NewDesc("gpuplane_requests", "Requests by state.", []string{"state"}, nil)
	quota := prometheus.NewDesc("gpuplane_team_quota",
		"Team quota by resource, in base units: resource=gpu in GPUs, cpu in cores, memory in bytes.", []string{"team", "resource"}, nil)
	alloc := prometheus.NewDesc("gpuplane_team_allocated",
		"What KAI reports allocated in the team's live virtual clusters (as last observed by the worker), by resource, in base units: resource=gpu in GPUs, cpu in cores, memory in bytes.",
		[]string{"team", "resource"}, nil)
	return []prometheus.Collector{
		telemetry.NewQueryCollector("virtual_clusters", log, []*prometheus.Desc{vcs}, func(ctx context.Context, ch chan<- prometheus.Metric) error {
			counts, err := virtualcluster.CountByPhase(ctx, db)
			if err == nil {
				telemetry.Counts(vcs, virtualcluster.PhasesWhere(virtualcluster.Phase.Valid), counts, ch)
			}
			return err
		}),
		telemetry.NewQueryCollector("requests", log, []*prometheus.Desc{reqs}, func(ctx context.Context, ch chan<- prometheus.Metric) error {
			counts, err := request.CountByState(ctx, db)
			if err == nil {
				states := make([]string, len(request.States))
				for i, s := range request.States {
					states[i] = string(s)
				}
				telemetry.Counts(reqs, states, counts, ch)
			}
			return err
		}),
		telemetry.NewQueryCollector("teams", log, []*prometheus.Desc{quota, alloc}, func(ctx context.Context, ch chan<- prometheus.Metric) error {
			usage, err := tenancy.Usage(ctx, db)
			if err != nil {
				return err
			}
			for _, u := range usage {
				for _, m := range telemetry.ResourceGauges(quota, u.Team, int64(u.Quota.GPU), u.Quota.CPUMillis, u.Quota.MemoryBytes) {
					ch <- m
				}
				for _, m := range telemetry.ResourceGauges(alloc, u.Team, int64(u.Allocated.GPU), u.Allocated.CPUMillis, u.Allocated.MemoryBytes) {
					ch <- m
				}
			}
			return nil
		}),
	}
}
