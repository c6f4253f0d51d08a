package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/telemetry"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Job kinds and outcomes, the labels of gpuplane_reconcile_*.
const (
	KindApply  = "apply"  // converge the host on the desired state
	KindDelete = "delete" // remove the virtual cluster from the host
	KindNone   = "none"   // nothing to converge (gone, pending, failed...)

	OutcomeSuccess  = "success"   // converged; the work item is gone
	OutcomeRequeued = "requeued"  // applied, control plane not ready yet: looked at again soon
	OutcomeRetry    = "retry"     // failed; retried with backoff
	OutcomeFailed   = "failed"    // failed for good (permanent error or attempts exhausted)
	OutcomeCanceled = "canceled"  // the worker stopped mid-job; another run starts over
	OutcomeHostDown = "host_down" // its host cluster is unreachable: DEGRADED, looked at again later
)

const tracerName = "github.com/gpuplane/gpuplane/internal/reconcile"

type workerMetrics struct {
	jobs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	steps    *prometheus.HistogramVec
	inFlight prometheus.Gauge
	// deadlines counts PROVISIONING -> DEGRADED at the provisioning deadline.
	deadlines prometheus.Counter
}

type workerTelemetry struct {
	m      workerMetrics
	tracer trace.Tracer
}

// newWorkerTelemetry creates the worker's metrics and registers them on reg
// (when set); a registry that has them already (a second worker in the
// same process) shares them.
func newWorkerTelemetry(reg prometheus.Registerer, tp trace.TracerProvider) *workerTelemetry {
	m := workerMetrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_reconcile_total",
			Help: "Reconcile jobs finished, by kind (apply, delete, none) and outcome (success, requeued, retry, failed, canceled, host_down).",
		}, []string{"kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuplane_reconcile_duration_seconds",
			Help:    "Time a reconcile job took, by kind and outcome.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"kind", "outcome"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpuplane_reconcile_step_duration_seconds",
			Help: "Time a host-cluster step of a reconcile took: observe, apply (whole), delete, and apply's parts " +
				"apply_namespace, apply_queues, apply_guardrails, apply_network_policy, apply_release.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"step"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuplane_reconcile_in_flight",
			Help: "Reconcile jobs running now in this process.",
		}),
		deadlines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuplane_reconcile_provisioning_deadline_exceeded_total",
			Help: "Virtual clusters moved from PROVISIONING to DEGRADED because they were not ready within the provisioning deadline.",
		}),
	}
	if reg != nil {
		m.jobs = register(reg, m.jobs)
		m.duration = register(reg, m.duration)
		m.steps = register(reg, m.steps)
		m.inFlight = register(reg, m.inFlight)
		m.deadlines = register(reg, m.deadlines)
	}
	return &workerTelemetry{m: m, tracer: telemetry.OrNoop(tp).Tracer(tracerName)}
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// job is one reconcile in flight: its span, and what the host calls and
// reconcile learnt about it.
type job struct {
	t        *workerTelemetry
	span     trace.Span
	start    time.Time
	kind     string
	requeued bool
	hostDown bool
}

type jobKey struct{}

// startJob starts the job's span as a child of the span that enqueued the
// work (the API call that approved the change), so one trace runs from the
// REST call to the host cluster; work nobody traced starts a new trace.
func (t *workerTelemetry) startJob(ctx context.Context, c claim) (context.Context, *job) {
	j := &job{t: t, start: time.Now(), kind: KindNone}
	parent := telemetry.ContextWithTraceParent(ctx, c.TraceParent)
	ctx, j.span = t.tracer.Start(parent, "reconcile", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(telemetry.AttrVirtualCluster.String(c.VirtualCluster), telemetry.AttrAttempt.Int(c.Attempts)))
	t.m.inFlight.Inc()
	return context.WithValue(ctx, jobKey{}, j), j
}

func jobFrom(ctx context.Context) *job {
	j, _ := ctx.Value(jobKey{}).(*job)
	return j
}

// markRequeued records that the reconcile asked to be looked at again
// without a failure (the control plane is still starting).
func markRequeued(ctx context.Context) {
	if j := jobFrom(ctx); j != nil {
		j.requeued = true
	}
}

// markHostDown records that the virtual cluster's host cluster was down.
func markHostDown(ctx context.Context) {
	if j := jobFrom(ctx); j != nil {
		j.hostDown = true
	}
}

func setKind(ctx context.Context, kind string) {
	if j := jobFrom(ctx); j != nil {
		j.kind = kind
	}
}

// outcome classifies a finished reconcile the way process and fail treat it.
func (w *Worker) outcome(ctx context.Context, c claim, err error) string {
	switch {
	case ctx.Err() != nil:
		return OutcomeCanceled
	case err != nil && c.Attempts < w.cfg.MaxAttempts && !permanent(err):
		return OutcomeRetry
	case err != nil:
		return OutcomeFailed
	}
	if j := jobFrom(ctx); j != nil && j.hostDown {
		return OutcomeHostDown
	}
	if j := jobFrom(ctx); j != nil && j.requeued {
		return OutcomeRequeued
	}
	return OutcomeSuccess
}

func (j *job) end(_ context.Context, outcome string, err error) {
	j.t.m.inFlight.Dec()
	j.t.m.jobs.WithLabelValues(j.kind, outcome).Inc()
	j.t.m.duration.WithLabelValues(j.kind, outcome).Observe(time.Since(j.start).Seconds())
	j.span.SetAttributes(telemetry.AttrKind.String(j.kind), telemetry.AttrOutcome.String(outcome))
	if outcome == OutcomeCanceled {
		err = nil // not the job's fault
	}
	telemetry.EndSpan(j.span, err)
}

// instrumentedHost times and traces the host-cluster steps of a reconcile.
type instrumentedHost struct {
	Host
	t *workerTelemetry
}

func instrumentHost(h Host, t *workerTelemetry) Host {
	if h == nil {
		return nil
	}
	if _, ok := h.(*instrumentedHost); ok {
		return h
	}
	return &instrumentedHost{Host: h, t: t}
}

func (h *instrumentedHost) step(ctx context.Context, name string) (context.Context, func(error)) {
	ctx, span := h.t.tracer.Start(ctx, "hostcluster."+name, trace.WithAttributes(telemetry.AttrStep.String(name)))
	start := time.Now()
	return ctx, func(err error) {
		h.t.m.steps.WithLabelValues(name).Observe(time.Since(start).Seconds())
		telemetry.EndSpan(span, err)
	}
}

func (h *instrumentedHost) Apply(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Steps, error) {
	setKind(ctx, KindApply)
	ctx, done := h.step(ctx, "apply")
	steps, err := h.Host.Apply(ctx, vc)
	for _, s := range steps {
		if s.Duration > 0 {
			h.t.m.steps.WithLabelValues("apply_" + snake(string(s.Step))).Observe(s.Duration.Seconds())
		}
	}
	done(err)
	return steps, err
}

func (h *instrumentedHost) Observe(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Observed, error) {
	setKind(ctx, KindApply)
	ctx, done := h.step(ctx, "observe")
	obs, err := h.Host.Observe(ctx, vc)
	done(err)
	return obs, err
}

// Unchanged forwards to the host when it can tell (unchangedChecker);
// otherwise every resync takes the full path.
func (h *instrumentedHost) Unchanged(ctx context.Context, vc hostcluster.VirtualCluster, o hostcluster.Observed) (bool, error) {
	u, ok := h.Host.(unchangedChecker)
	if !ok {
		return false, nil
	}
	ctx, done := h.step(ctx, "unchanged")
	same, err := u.Unchanged(ctx, vc, o)
	done(err)
	return same, err
}

func (h *instrumentedHost) Delete(ctx context.Context, vc hostcluster.VirtualCluster) error {
	setKind(ctx, KindDelete)
	ctx, done := h.step(ctx, "delete")
	err := h.Host.Delete(ctx, vc)
	done(err)
	return err
}

// snake turns "NetworkPolicy" into "network_policy".
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// NewQueueCollector reports the reconcile queue at scrape time, with one
// query: gpuplane_reconcile_queue_depth (every work item),
// gpuplane_reconcile_queue_due (due now and not leased: waiting for a
// worker), gpuplane_reconcile_queue_leased (being worked on) and
// gpuplane_reconcile_queue_oldest_due_age_seconds (how long the oldest due
// item has waited; 0 when none).
func NewQueueCollector(q store.Querier, log *slog.Logger) prometheus.Collector {
	depth := prometheus.NewDesc("gpuplane_reconcile_queue_depth", "Virtual clusters queued for a reconcile (reconcile_work rows).", nil, nil)
	due := prometheus.NewDesc("gpuplane_reconcile_queue_due", "Queued virtual clusters due now and not leased: waiting for a worker.", nil, nil)
	leased := prometheus.NewDesc("gpuplane_reconcile_queue_leased", "Queued virtual clusters a worker holds a lease on.", nil, nil)
	oldest := prometheus.NewDesc("gpuplane_reconcile_queue_oldest_due_age_seconds", "How long the oldest due, unleased work item has been due (0 when none).", nil, nil)
	return telemetry.NewQueryCollector("reconcile_queue", log, []*prometheus.Desc{depth, due, leased, oldest},
		func(ctx context.Context, ch chan<- prometheus.Metric) error {
			st, err := workqueue.Stats(ctx, q)
			if err != nil {
				return err
			}
			ch <- prometheus.MustNewConstMetric(depth, prometheus.GaugeValue, float64(st.Depth))
			ch <- prometheus.MustNewConstMetric(due, prometheus.GaugeValue, float64(st.Due))
			ch <- prometheus.MustNewConstMetric(leased, prometheus.GaugeValue, float64(st.Leased))
			ch <- prometheus.MustNewConstMetric(oldest, prometheus.GaugeValue, st.OldestDueAge.Seconds())
			return nil
		})
}
