package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultQueryTimeout bounds one scrape-time query.
const DefaultQueryTimeout = 2 * time.Second

// QueryCollector is a prometheus.Collector whose samples come from one SQL
// query run at scrape time under a short timeout, so the numbers are exact
// at every scrape and nothing polls the database between scrapes. Besides
// its own metrics it reports gpuplane_metrics_query_up{query} (0 when the
// query failed; its metrics are then missing from that scrape) and
// gpuplane_metrics_query_duration_seconds{query}. Registries collect
// collectors concurrently, so several QueryCollectors cost one round trip
// of wall time.
type QueryCollector struct {
	name     string
	descs    []*prometheus.Desc
	collect  func(ctx context.Context, ch chan<- prometheus.Metric) error
	timeout  time.Duration
	log      *slog.Logger
	up       *prometheus.Desc
	duration *prometheus.Desc
}

// NewQueryCollector builds a collector named name (the query label) that
// describes descs and emits samples with collect.
func NewQueryCollector(name string, log *slog.Logger, descs []*prometheus.Desc, collect func(ctx context.Context, ch chan<- prometheus.Metric) error) *QueryCollector {
	if log == nil {
		log = slog.Default()
	}
	labels := prometheus.Labels{"query": name}
	return &QueryCollector{
		name: name, descs: descs, collect: collect, timeout: DefaultQueryTimeout, log: log,
		up: prometheus.NewDesc("gpuplane_metrics_query_up",
			"1 when the scrape-time query behind some gpuplane metrics succeeded, 0 when it failed (those metrics are then absent).", nil, labels),
		duration: prometheus.NewDesc("gpuplane_metrics_query_duration_seconds",
			"How long the scrape-time query behind some gpuplane metrics took.", nil, labels),
	}
}

// Describe implements prometheus.Collector.
func (c *QueryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.duration
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *QueryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	err := c.collect(ctx, ch)
	ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, time.Since(start).Seconds())
	up := 1.0
	if err != nil {
		up = 0
		c.log.Warn("metrics query failed", "query", c.name, "error", err)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

// Virtual cluster phases and request states, as the schema's CHECK
// constraints list them: every one is reported, zero included, so a
// series does not vanish when its count drops to nothing.
var (
	vcPhases      = []string{"PENDING_APPROVAL", "PROVISIONING", "READY", "DEGRADED", "DELETING", "DELETED", "FAILED", "REJECTED"}
	requestStates = []string{"PENDING", "APPROVED", "REJECTED", "CANCELLED", "APPLIED", "FAILED"}
)

// StateCollectors are the scrape-time gauges about what the database holds:
// virtual clusters per phase, requests per state, and per-team quota and
// allocation. Each is one query.
func StateCollectors(pool *pgxpool.Pool, log *slog.Logger) []prometheus.Collector {
	vcs := prometheus.NewDesc("gpuplane_virtual_clusters", "Virtual clusters by phase.", []string{"phase"}, nil)
	reqs := prometheus.NewDesc("gpuplane_requests", "Requests by state.", []string{"state"}, nil)
	quota := prometheus.NewDesc("gpuplane_team_quota",
		"Team quota by resource, in base units: resource=gpu in GPUs, cpu in cores, memory in bytes.", []string{"team", "resource"}, nil)
	alloc := prometheus.NewDesc("gpuplane_team_allocated",
		"What KAI reports allocated in the team's live virtual clusters (as last observed by the worker), by resource, in base units: resource=gpu in GPUs, cpu in cores, memory in bytes.",
		[]string{"team", "resource"}, nil)
	return []prometheus.Collector{
		NewQueryCollector("virtual_clusters", log, []*prometheus.Desc{vcs}, func(ctx context.Context, ch chan<- prometheus.Metric) error {
			return countBy(ctx, pool, `SELECT phase, count(*) FROM virtual_clusters GROUP BY phase`, vcPhases, vcs, ch)
		}),
		NewQueryCollector("requests", log, []*prometheus.Desc{reqs}, func(ctx context.Context, ch chan<- prometheus.Metric) error {
			return countBy(ctx, pool, `SELECT state, count(*) FROM requests GROUP BY state`, requestStates, reqs, ch)
		}),
		NewQueryCollector("teams", log, []*prometheus.Desc{quota, alloc}, func(ctx context.Context, ch chan<- prometheus.Metric) error {
			// Allocation counts the phases tenancy.AllocatedToTeam counts.
			rows, err := pool.Query(ctx, `
				SELECT t.id, t.gpu_centi, t.cpu_millis, t.memory_bytes,
				       COALESCE(SUM(v.alloc_gpu_centi), 0), COALESCE(SUM(v.alloc_cpu_millis), 0), COALESCE(SUM(v.alloc_memory_bytes), 0)
				  FROM teams t
				  LEFT JOIN virtual_clusters v ON v.team_id = t.id AND v.phase NOT IN ('PENDING_APPROVAL', 'REJECTED', 'DELETED')
				 GROUP BY t.id`)
			if err != nil {
				return err
			}
			var (
				team             string
				qGPU, qCPU, qMem int64
				aGPU, aCPU, aMem int64
				emitted          []prometheus.Metric
			)
			_, err = pgx.ForEachRow(rows, []any{&team, &qGPU, &qCPU, &qMem, &aGPU, &aCPU, &aMem}, func() error {
				emitted = append(emitted, resourceGauges(quota, team, qGPU, qCPU, qMem)...)
				emitted = append(emitted, resourceGauges(alloc, team, aGPU, aCPU, aMem)...)
				return nil
			})
			if err != nil {
				return err
			}
			for _, m := range emitted {
				ch <- m
			}
			return nil
		}),
	}
}

// resourceGauges converts stored units (GPU hundredths, CPU millicores,
// bytes) to base units.
func resourceGauges(d *prometheus.Desc, team string, gpuCenti, cpuMillis, memBytes int64) []prometheus.Metric {
	return []prometheus.Metric{
		prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(gpuCenti)/100, team, "gpu"),
		prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(cpuMillis)/1000, team, "cpu"),
		prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(memBytes), team, "memory"),
	}
}

// countBy emits one gauge per value of known (zero when absent) from a
// "SELECT label, count(*) ... GROUP BY label" query; unknown labels are
// reported too.
func countBy(ctx context.Context, pool *pgxpool.Pool, sql string, known []string, d *prometheus.Desc, ch chan<- prometheus.Metric) error {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return err
	}
	counts := map[string]int64{}
	var label string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&label, &n}, func() error { counts[label] = n; return nil }); err != nil {
		return err
	}
	for _, k := range known {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(counts[k]), k)
		delete(counts, k)
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), k)
	}
	return nil
}
