package telemetry

import (
	"context"
	"log/slog"
	"maps"
	"time"

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

// Counts emits one gauge per value of known (zero when absent) from counts
// by label; labels not in known are reported too, so a series does not
// vanish when its count drops to nothing nor hide an unexpected value.
func Counts(d *prometheus.Desc, known []string, counts map[string]int64, ch chan<- prometheus.Metric) {
	left := maps.Clone(counts)
	for _, k := range known {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(left[k]), k)
		delete(left, k)
	}
	for k, v := range left {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), k)
	}
}

// ResourceGauges converts stored units (GPU hundredths, CPU millicores,
// bytes) to base units.
func ResourceGauges(d *prometheus.Desc, team string, gpuCenti, cpuMillis, memBytes int64) []prometheus.Metric {
	return []prometheus.Metric{
		prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(gpuCenti)/100, team, "gpu"),
		prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(cpuMillis)/1000, team, "cpu"),
		prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(memBytes), team, "memory"),
	}
}
