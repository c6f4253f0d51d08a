package reconcile_test

// The worker's metrics, spans and lease release on shutdown, with a fake
// host cluster (no envtest): every outcome of a reconcile job, and a job
// span that continues the trace stored with the work item.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

// fakeHost answers the worker without a cluster; block makes Apply wait
// for its context (a reconcile in flight at shutdown).
type fakeHost struct {
	applyErr error
	ready    bool
	block    bool
	entered  chan struct{}
}

func (f *fakeHost) Apply(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Steps, error) {
	if f.entered != nil {
		close(f.entered)
		f.entered = nil
	}
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	steps := hostcluster.Steps{{Step: hostcluster.StepNamespace, Duration: time.Millisecond}, {Step: hostcluster.StepNetworkPolicy, Duration: time.Millisecond}}
	if f.applyErr != nil {
		steps[1].Err = f.applyErr
	}
	return steps, f.applyErr
}

func (f *fakeHost) Observe(ctx context.Context, vc hostcluster.VirtualCluster) (hostcluster.Observed, error) {
	return hostcluster.Observed{NamespaceExists: true, Queues: []hostcluster.QueueState{{Name: "q", Exists: true}}, GuardrailsPresent: true, NetworkPolicyPresent: true,
		Release: &hostcluster.ReleaseState{Status: "deployed", Revision: 1}, ReleaseUpToDate: true,
		ControlPlaneReady: f.ready, KubeconfigSecretPresent: f.ready, Endpoint: "https://" + vc.Name + ".vc-" + vc.Name + ".svc"}, nil
}

func (f *fakeHost) Delete(ctx context.Context, vc hostcluster.VirtualCluster) error { return nil }

const (
	traceID      = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpanID = "00f067aa0ba902b7"
	traceParent  = "00-" + traceID + "-" + parentSpanID + "-01"
)

// seedWork creates a department, a team and virtual cluster vc in phase,
// queued for a reconcile with traceParent.
func seedWork(t *testing.T, pool *pgxpool.Pool, vc, phase string) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO departments (id) VALUES ('dept') ON CONFLICT DO NOTHING`,
		`INSERT INTO teams (id, department_id, isolation_tier, cpu_millis) VALUES ('team', 'dept', 'SHARED', 1000) ON CONFLICT DO NOTHING`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// Placed on the default host cluster unless never approved.
	if _, err := pool.Exec(ctx, `INSERT INTO virtual_clusters (id, team_id, phase, cpu_millis, host_cluster_id)
		VALUES ($1, 'team', $2, 100, CASE WHEN $2 IN ('PENDING_APPROVAL', 'REJECTED') THEN NULL ELSE 'default' END)`, vc, phase); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO reconcile_work (virtual_cluster_id, trace_parent) VALUES ($1, $2)`, vc, traceParent); err != nil {
		t.Fatal(err)
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func TestWorkerTelemetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, phase    string
		host           *fakeHost
		kind, outcome  string
		steps          []string
		wantRowRemains bool
	}{
		{name: "converged", phase: "PROVISIONING", host: &fakeHost{ready: true}, kind: "apply", outcome: "success",
			steps: []string{"apply", "observe", "apply_namespace", "apply_network_policy"}},
		{name: "control plane starting", phase: "PROVISIONING", host: &fakeHost{}, kind: "apply", outcome: "requeued",
			steps: []string{"apply", "observe"}, wantRowRemains: true},
		{name: "transient failure", phase: "PROVISIONING", host: &fakeHost{applyErr: errors.New("connection refused")}, kind: "apply", outcome: "retry",
			steps: []string{"apply"}, wantRowRemains: true},
		{name: "permanent failure", phase: "PROVISIONING", host: &fakeHost{applyErr: errs.InvalidField("spec", "nope")}, kind: "apply", outcome: "failed",
			steps: []string{"apply"}},
		{name: "delete", phase: "DELETING", host: &fakeHost{}, kind: "delete", outcome: "success", steps: []string{"delete"}},
		{name: "nothing to do", phase: "REJECTED", host: &fakeHost{}, kind: "none", outcome: "success"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := storetest.Pool(t)
			seedWork(t, pool, "vc1", tc.phase)
			reg := prometheus.NewRegistry()
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			w := reconcile.New(store.New(pool), tc.host, slog.New(slog.DiscardHandler),
				reconcile.Config{ID: "w1", Metrics: reg, TracerProvider: tp, BackoffBase: time.Hour})
			if n, err := w.RunOnce(context.Background()); err != nil || n != 1 {
				t.Fatalf("RunOnce = %d, %v", n, err)
			}
			labels := map[string]string{"kind": tc.kind, "outcome": tc.outcome}
			if got := counterValue(t, reg, "gpuplane_reconcile_total", labels); got != 1 {
				t.Errorf("gpuplane_reconcile_total%v = %v, want 1", labels, got)
			}
			if got := counterValue(t, reg, "gpuplane_reconcile_duration_seconds", labels); got != 1 {
				t.Errorf("gpuplane_reconcile_duration_seconds%v count = %v, want 1", labels, got)
			}
			for _, s := range tc.steps {
				if got := counterValue(t, reg, "gpuplane_reconcile_step_duration_seconds", map[string]string{"step": s}); got < 1 {
					t.Errorf("no step duration for %s", s)
				}
			}
			if got := counterValue(t, reg, "gpuplane_reconcile_in_flight", nil); got != 0 {
				t.Errorf("in flight after the job: %v", got)
			}
			var rows int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM reconcile_work`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if (rows == 1) != tc.wantRowRemains {
				var phase, msg string
				_ = pool.QueryRow(context.Background(), `SELECT phase, status_message FROM virtual_clusters`).Scan(&phase, &msg)
				t.Errorf("reconcile_work rows after the job: %d (virtual cluster %s: %s)", rows, phase, msg)
			}

			// The job span continues the trace of the change that queued it.
			spans := exp.GetSpans()
			var job *tracetest.SpanStub
			for i := range spans {
				if spans[i].Name == "reconcile" {
					job = &spans[i]
				}
			}
			if job == nil {
				t.Fatalf("no reconcile span among %d spans", len(spans))
			}
			if job.SpanContext.TraceID().String() != traceID || job.Parent.SpanID().String() != parentSpanID || !job.Parent.IsRemote() {
				t.Errorf("reconcile span: trace %s parent %s, want trace %s parent %s", job.SpanContext.TraceID(), job.Parent.SpanID(), traceID, parentSpanID)
			}
			attrs := map[string]string{}
			for _, kv := range job.Attributes {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			if attrs["gpuplane.virtual_cluster"] != "vc1" || attrs["gpuplane.reconcile.kind"] != tc.kind || attrs["gpuplane.reconcile.outcome"] != tc.outcome {
				t.Errorf("reconcile span attributes: %v", attrs)
			}
			if job.SpanKind != trace.SpanKindConsumer {
				t.Errorf("reconcile span kind %v", job.SpanKind)
			}
			for _, s := range tc.steps {
				if strings.HasPrefix(s, "apply_") {
					continue // timed by hostcluster, which the fake replaces
				}
				found := false
				for _, sp := range spans {
					if sp.Name == "hostcluster."+s && sp.Parent.SpanID() == job.SpanContext.SpanID() {
						found = true
					}
				}
				if !found {
					t.Errorf("no hostcluster.%s span under the reconcile span", s)
				}
			}
		})
	}
}

// TestWorkerReleasesLeasesOnShutdown: a reconcile in flight when the worker
// stops (SIGTERM cancels Run's context) gives its lease back at once, so
// another worker can take the virtual cluster without waiting for expiry.
func TestWorkerReleasesLeasesOnShutdown(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	seedWork(t, pool, "vc1", "PROVISIONING")
	entered := make(chan struct{})
	host := &fakeHost{block: true, entered: entered}
	reg := prometheus.NewRegistry()
	w := reconcile.New(store.New(pool), host, slog.New(slog.DiscardHandler),
		reconcile.Config{ID: "w-shutdown", Lease: time.Hour, Poll: 20 * time.Millisecond, Metrics: reg})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never started the reconcile")
	}
	lease := func() (owner string, expires bool, attempts int) {
		t.Helper()
		if err := pool.QueryRow(context.Background(),
			`SELECT lease_owner, lease_expire_time IS NOT NULL, attempts FROM reconcile_work WHERE virtual_cluster_id = 'vc1'`).
			Scan(&owner, &expires, &attempts); err != nil {
			t.Fatal(err)
		}
		return
	}
	if owner, expires, attempts := lease(); owner != "w-shutdown" || !expires || attempts != 1 {
		t.Fatalf("while reconciling: lease_owner %q, expires %v, attempts %d", owner, expires, attempts)
	}
	if got := counterValue(t, reg, "gpuplane_reconcile_in_flight", nil); got != 1 {
		t.Errorf("gpuplane_reconcile_in_flight while reconciling = %v", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if owner, expires, attempts := lease(); owner != "" || expires || attempts != 0 {
		t.Errorf("after shutdown: lease_owner %q, lease expires %v, attempts %d; want the lease released and the attempt not counted", owner, expires, attempts)
	}
	if got := counterValue(t, reg, "gpuplane_reconcile_total", map[string]string{"kind": "apply", "outcome": "canceled"}); got != 1 {
		t.Errorf("gpuplane_reconcile_total{outcome=canceled} = %v", got)
	}
}
