package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
)

// telSpanTree indexes recorded spans by parent.
type telSpanTree struct {
	byID     map[trace.SpanID]tracetest.SpanStub
	children map[trace.SpanID][]tracetest.SpanStub
}

func newTelSpanTree(spans tracetest.SpanStubs, traceID trace.TraceID) telSpanTree {
	st := telSpanTree{byID: map[trace.SpanID]tracetest.SpanStub{}, children: map[trace.SpanID][]tracetest.SpanStub{}}
	for _, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			continue
		}
		st.byID[s.SpanContext.SpanID()] = s
		st.children[s.Parent.SpanID()] = append(st.children[s.Parent.SpanID()], s)
	}
	for _, c := range st.children {
		sort.Slice(c, func(i, j int) bool { return c[i].StartTime.Before(c[j].StartTime) })
	}
	return st
}

func telAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// print renders the subtree under s, one span per line, with the
// attributes that say what it did.
func (st telSpanTree) print(b *strings.Builder, s tracetest.SpanStub, depth int) {
	line := strings.Repeat("  ", depth) + s.Name + " [" + strings.TrimPrefix(s.SpanKind.String(), "SpanKind") + "]"
	var extra []string
	for _, k := range []string{"gpuplane.request_id", "gpuplane.virtual_cluster", "gpuplane.reconcile.kind", "gpuplane.reconcile.outcome", "http.response.status_code", "rpc.response.status_code", "rpc.grpc.status_code"} {
		if v := telAttr(s, k); v != "" {
			extra = append(extra, k+"="+v)
		}
	}
	if q := telAttr(s, "db.query.text"); q != "" {
		q = strings.Join(strings.Fields(q), " ")
		if len(q) > 70 {
			q = q[:70] + "…"
		}
		extra = append(extra, q)
	}
	if u := telAttr(s, "url.full"); u != "" && strings.HasPrefix(s.Name, "k8s ") {
		if i := strings.Index(u, "/api"); i >= 0 {
			u = u[i:]
		}
		extra = append(extra, u)
	}
	if len(extra) > 0 {
		line += " " + strings.Join(extra, " ")
	}
	b.WriteString(line + "\n")
	for _, c := range st.children[s.SpanContext.SpanID()] {
		st.print(b, c, depth+1)
	}
}

func (st telSpanTree) find(parent trace.SpanID, pred func(tracetest.SpanStub) bool) (tracetest.SpanStub, bool) {
	for _, c := range st.children[parent] {
		if pred(c) {
			return c, true
		}
	}
	return tracetest.SpanStub{}, false
}

// count counts spans in the subtree under id matching pred.
func (st telSpanTree) count(id trace.SpanID, pred func(tracetest.SpanStub) bool) int {
	n := 0
	for _, c := range st.children[id] {
		if pred(c) {
			n++
		}
		n += st.count(c.SpanContext.SpanID(), pred)
	}
	return n
}

// TestTraceFromApprovalToHostCluster: an approval over REST and the worker
// run it causes form one trace: HTTP server span -> gateway's gRPC client
// span -> gRPC server span (with the request id) -> SQL spans, and the
// worker's reconcile span as a child of the approval's gRPC server span
// (through reconcile_work.trace_parent), with its host-cluster steps and
// their Kubernetes API calls underneath.
func TestTraceFromApprovalToHostCluster(t *testing.T) {
	t.Parallel()
	envtestenv.SkipIfShort(t)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, err := envtestenv.Start(sctx, envtestenv.Options{})
	if err != nil {
		t.Fatalf("real API server needed: %v", err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	e := apptest.Start(t, apptest.Options{Seed: true, HostConfig: api.RESTConfig(), TracerProvider: tp})

	asked := e.Do(t, "bob", "POST", "/v1/requests", map[string]any{
		"team": "teams/team-a", "justification": "tracing",
		"createVirtualCluster": map[string]any{"virtualClusterId": "traced",
			"spec": map[string]any{"quota": map[string]any{"gpu": "1", "cpuMillis": "1000", "memoryBytes": "1073741824"}}},
	})
	if asked.Status != http.StatusOK {
		t.Fatalf("create request: %d %s", asked.Status, asked.Body)
	}
	name := asked.Map(t)["name"].(string)
	approved := e.Do(t, "alice", "POST", "/v1/"+name+":approve", map[string]any{"reason": "traced"})
	if approved.Status != http.StatusOK {
		t.Fatalf("approve: %d %s", approved.Status, approved.Body)
	}
	requestID := approved.Header.Get("X-Request-Id")

	// A worker run, as `gpuplane worker` would do it, on the server's host
	// client (whose transport is traced) and tracer provider.
	w := reconcile.New(store.New(e.App.Pool()), e.App.Host, slog.New(slog.DiscardHandler),
		reconcile.Config{ID: "trace-test", TracerProvider: tp})
	if n, err := w.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}

	spans := exp.GetSpans()
	var root tracetest.SpanStub
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer && strings.HasSuffix(telAttr(s, "url.path"), ":approve") {
			root = s
		}
	}
	if !root.SpanContext.IsValid() {
		t.Fatalf("no HTTP server span for the approval among %d spans", len(spans))
	}
	st := newTelSpanTree(spans, root.SpanContext.TraceID())
	var tree strings.Builder
	st.print(&tree, root, 0)
	t.Logf("trace %s:\n%s", root.SpanContext.TraceID(), tree.String())

	if root.Parent.IsValid() {
		t.Errorf("HTTP span has a parent %v; want it to be the root", root.Parent.SpanID())
	}
	const method = "gpuplane.v1.RequestService/ApproveRequest"
	client, ok := st.find(root.SpanContext.SpanID(), func(s tracetest.SpanStub) bool {
		return s.Name == method && s.SpanKind == trace.SpanKindClient
	})
	if !ok {
		t.Fatalf("no gRPC client span %s under the HTTP span", method)
	}
	server, ok := st.find(client.SpanContext.SpanID(), func(s tracetest.SpanStub) bool {
		return s.Name == method && s.SpanKind == trace.SpanKindServer
	})
	if !ok {
		t.Fatalf("no gRPC server span %s under the gateway's client span", method)
	}
	if got := telAttr(server, "gpuplane.request_id"); got == "" || got != requestID {
		t.Errorf("gRPC server span request id %q, response header %q", got, requestID)
	}
	isSQL := func(s tracetest.SpanStub) bool { return telAttr(s, "db.system.name") == "postgresql" }
	if n := st.count(server.SpanContext.SpanID(), isSQL); n == 0 {
		t.Errorf("no SQL spans under the gRPC server span")
	}
	// Anywhere below the server span: writes nobody reads back travel in
	// a batch with the next statement (store.Tx.ExecDeferred), so their
	// span is a batch's child.
	if st.count(server.SpanContext.SpanID(), func(s tracetest.SpanStub) bool {
		return isSQL(s) && strings.Contains(telAttr(s, "db.query.text"), "reconcile_work")
	}) == 0 {
		t.Errorf("no SQL span enqueueing the reconcile under the gRPC server span")
	}
	job, ok := st.find(server.SpanContext.SpanID(), func(s tracetest.SpanStub) bool { return s.Name == "reconcile" })
	if !ok {
		t.Fatalf("no reconcile span in the approval's trace under its gRPC server span")
	}
	if telAttr(job, "gpuplane.virtual_cluster") != "traced" || telAttr(job, "gpuplane.reconcile.kind") != "apply" {
		t.Errorf("reconcile span attributes: %v", job.Attributes)
	}
	if n := st.count(job.SpanContext.SpanID(), isSQL); n == 0 {
		t.Errorf("no SQL spans under the reconcile span")
	}
	apply, ok := st.find(job.SpanContext.SpanID(), func(s tracetest.SpanStub) bool { return s.Name == "hostcluster.apply" })
	if !ok {
		t.Fatalf("no hostcluster.apply span under the reconcile span")
	}
	if _, ok := st.find(job.SpanContext.SpanID(), func(s tracetest.SpanStub) bool { return s.Name == "hostcluster.observe" }); !ok {
		t.Errorf("no hostcluster.observe span under the reconcile span")
	}
	ns, ok := st.find(apply.SpanContext.SpanID(), func(s tracetest.SpanStub) bool { return s.Name == "hostcluster.Apply Namespace" })
	if !ok {
		t.Fatalf("no Namespace step span under hostcluster.apply")
	}
	isK8s := func(s tracetest.SpanStub) bool {
		return strings.HasPrefix(s.Name, "k8s ") && s.SpanKind == trace.SpanKindClient
	}
	if _, ok := st.find(ns.SpanContext.SpanID(), func(s tracetest.SpanStub) bool { return s.Name == "k8s PATCH namespaces" }); !ok {
		t.Errorf("no k8s PATCH namespaces span under the Namespace step")
	}
	if n := st.count(job.SpanContext.SpanID(), isK8s); n < 5 {
		t.Errorf("%d Kubernetes API spans under the reconcile span, want several", n)
	}

	// Tokens never end up in span attributes.
	for _, s := range spans {
		for _, kv := range s.Attributes {
			for _, user := range []string{"alice", "bob"} {
				if strings.Contains(kv.Value.String(), e.Token(t, user)) {
					t.Errorf("span %s attribute %s holds %s's token", s.Name, kv.Key, user)
				}
			}
		}
	}
}
