package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/server"
)

// seen is what a test service's handler observed of its call.
type seen struct {
	subject, requestID string
	hasAuthorization   bool
	outgoing           metadata.MD
}

// teamsProbe answers GetTeam for "teams/ok", fails with NOT_FOUND for
// anything else, sets a trailer, and reports what it saw on calls.
type teamsProbe struct {
	pb.UnimplementedTeamServiceServer
	calls chan seen
}

func (p *teamsProbe) GetTeam(ctx context.Context, req *pb.GetTeamRequest) (*pb.Team, error) {
	var s seen
	if pr, ok := reqctx.PrincipalFrom(ctx); ok {
		s.subject = pr.Subject
	}
	s.requestID = reqctx.CorrelationID(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	s.hasAuthorization = len(md.Get("authorization")) > 0
	s.outgoing, _ = metadata.FromOutgoingContext(ctx)
	p.calls <- s
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-probe", "done"))
	if req.GetName() != "teams/ok" {
		return nil, errs.NotFound(req.GetName())
	}
	return &pb.Team{Name: req.GetName(), DisplayName: "OK team"}, nil
}

type probeServer struct {
	srv      *server.Server
	base     string
	registry *prometheus.Registry
	spans    *tracetest.InMemoryExporter
}

func startProbeServer(t *testing.T, teams pb.TeamServiceServer) *probeServer {
	t.Helper()
	ps := &probeServer{registry: prometheus.NewRegistry(), spans: tracetest.NewInMemoryExporter()}
	srv, err := server.New(context.Background(), server.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler), Auth: tokenOK{}, Registry: ps.registry,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(ps.spans)),
		Services:       server.Services{Teams: teams},
	})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ps.srv, ps.base = srv, "http://"+srv.HTTPAddr()
	return ps
}

func (ps *probeServer) get(t *testing.T, path string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ps.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return resp, string(body)
}

// handled is gpuplane_grpc_server_handled_total for method and code.
func (ps *probeServer) handled(t *testing.T, method, code string) float64 {
	t.Helper()
	mfs, err := ps.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpuplane_grpc_server_handled_total" {
			if v, ok := apptest.MetricValue(mf, map[string]string{"method": method, "code": code}); ok {
				return v
			}
		}
	}
	return 0
}

// TestRESTPassesTheGRPCChain: a REST call, served in-process, passes what
// a gRPC call passes: authentication (the handler sees the principal and
// the caller's authorization as incoming metadata, nothing outgoing), the
// request id (the caller's, echoed in the answer, success or error), the
// call metrics, the handler's trailer, and the spans HTTP -> gRPC client
// -> gRPC server with the request id on the server span.
func TestRESTPassesTheGRPCChain(t *testing.T) {
	probe := &teamsProbe{calls: make(chan seen, 4)}
	ps := startProbeServer(t, probe)
	const method = "/gpuplane.v1.TeamService/GetTeam"

	resp, body := ps.get(t, "/v1/teams/ok", http.Header{
		"Authorization": {"Bearer ok"}, "X-Request-Id": {"rest-call-1"}, "Te": {"trailers"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/teams/ok: %d %s", resp.StatusCode, body)
	}
	var team struct{ Name, DisplayName string }
	if err := json.Unmarshal([]byte(body), &team); err != nil || team.Name != "teams/ok" || team.DisplayName != "OK team" {
		t.Errorf("GET /v1/teams/ok answered %s (%v)", body, err)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "rest-call-1" {
		t.Errorf("X-Request-Id %q, want the caller's rest-call-1", got)
	}
	if got := resp.Trailer.Get("Grpc-Trailer-X-Probe"); got != "done" {
		t.Errorf("trailer Grpc-Trailer-X-Probe %q, want the handler's \"done\" (trailers: %v)", got, resp.Trailer)
	}
	s := <-probe.calls
	if s.subject != "fuzz" || s.requestID != "rest-call-1" || !s.hasAuthorization {
		t.Errorf("the handler saw %+v; want subject fuzz, request id rest-call-1 and the authorization metadata", s)
	}
	if len(s.outgoing) != 0 {
		t.Errorf("the handler's context carries outgoing metadata %v; the caller's must not be passed on", s.outgoing)
	}
	if n := ps.handled(t, method, "OK"); n != 1 {
		t.Errorf("handled_total{code=OK} = %v after one REST call, want 1", n)
	}

	// An error keeps the request id and the mapping of the one chain.
	resp, body = ps.get(t, "/v1/teams/missing", http.Header{"Authorization": {"Bearer ok"}, "X-Request-Id": {"rest-call-2"}})
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/teams/missing: %d %s, want 404", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "rest-call-2" {
		t.Errorf("X-Request-Id of an error %q, want rest-call-2", got)
	}
	var st spb.Status
	if err := protojson.Unmarshal([]byte(body), &st); err != nil || !strings.Contains(st.GetMessage(), "teams/missing") {
		t.Errorf("error body %s (%v), want a google.rpc.Status naming teams/missing", body, err)
	}
	<-probe.calls
	if n := ps.handled(t, method, "NotFound"); n != 1 {
		t.Errorf("handled_total{code=NotFound} = %v after one failed REST call, want 1", n)
	}

	// The same method over gRPC: the handler sees the same.
	conn, err := grpc.NewClient(ps.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer ok", "x-request-id", "grpc-call-1")
	if _, err := pb.NewTeamServiceClient(conn).GetTeam(ctx, &pb.GetTeamRequest{Name: "teams/ok"}); err != nil {
		t.Fatalf("gRPC GetTeam: %v", err)
	}
	if g := <-probe.calls; g.subject != s.subject || g.requestID != "grpc-call-1" || !g.hasAuthorization || len(g.outgoing) != 0 {
		t.Errorf("over gRPC the handler saw %+v, over REST %+v", g, s)
	}
	if n := ps.handled(t, method, "OK"); n != 2 {
		t.Errorf("handled_total{code=OK} = %v after a REST and a gRPC call, want 2", n)
	}

	// Spans of the first REST call.
	spans := ps.spans.GetSpans()
	var server, client tracetest.SpanStub
	for _, sp := range spans {
		if sp.Name == "gpuplane.v1.TeamService/GetTeam" && sp.SpanKind == trace.SpanKindServer && attr(sp, "gpuplane.request_id") == "rest-call-1" {
			server = sp
		}
	}
	if !server.SpanContext.IsValid() {
		t.Fatalf("no gRPC server span with request id rest-call-1 among %d spans", len(spans))
	}
	for _, sp := range spans {
		if sp.SpanContext.SpanID() == server.Parent.SpanID() {
			client = sp
		}
	}
	if client.Name != "gpuplane.v1.TeamService/GetTeam" || client.SpanKind != trace.SpanKindClient {
		t.Fatalf("the server span's parent is %q (%v), want the gateway's client span", client.Name, client.SpanKind)
	}
	var root tracetest.SpanStub
	for _, sp := range spans {
		if sp.SpanContext.SpanID() == client.Parent.SpanID() {
			root = sp
		}
	}
	if root.SpanKind != trace.SpanKindServer || attr(root, "url.path") != "/v1/teams/ok" {
		t.Errorf("the client span's parent is %q (%v), want the HTTP server span of /v1/teams/ok", root.Name, root.SpanKind)
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// teamsBlocking holds GetTeam until released (or its context ends).
type teamsBlocking struct {
	pb.UnimplementedTeamServiceServer
	entered chan struct{}
	release chan struct{}
	ended   chan error // the handler's context error, nil when released
}

func (b *teamsBlocking) GetTeam(ctx context.Context, req *pb.GetTeamRequest) (*pb.Team, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
		// Cancelled first and released later counts as cancelled.
		if err := ctx.Err(); err != nil {
			b.ended <- err
			return nil, err
		}
		b.ended <- nil
		return &pb.Team{Name: req.GetName()}, nil
	case <-ctx.Done():
		b.ended <- ctx.Err()
		return nil, ctx.Err()
	}
}

func newTeamsBlocking() *teamsBlocking {
	return &teamsBlocking{entered: make(chan struct{}, 1), release: make(chan struct{}), ended: make(chan error, 1)}
}

type restResult struct {
	status int
	body   string
	err    error
}

func getAsync(url string) chan restResult {
	done := make(chan restResult, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer ok")
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			done <- restResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- restResult{status: resp.StatusCode, body: string(b)}
	}()
	return done
}

// TestInProcessCallsAcrossShutdown: a REST call in flight when Shutdown
// starts completes and Shutdown waits for it; a call reaching the gateway
// after Shutdown is refused with UNAVAILABLE (503), not a panic.
func TestInProcessCallsAcrossShutdown(t *testing.T) {
	teams := newTeamsBlocking()
	ps := startProbeServer(t, teams)
	done := getAsync(ps.base + "/v1/teams/slow")
	<-teams.entered

	stopped := make(chan error, 1)
	go func() { stopped <- ps.srv.Shutdown(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned with a call in flight: %v", err)
	case r := <-done:
		t.Fatalf("the call finished before it was released: %+v", r)
	default:
	}
	close(teams.release)
	if r := <-done; r.err != nil || r.status != http.StatusOK || !strings.Contains(r.body, "teams/slow") {
		t.Errorf("the in-flight REST call: %d %v %s", r.status, r.err, r.body)
	}
	if err := <-teams.ended; err != nil {
		t.Errorf("the in-flight handler's context ended: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}

	// The listener is closed; the handler itself still answers, cleanly.
	req := httptest.NewRequest(http.MethodGet, "/v1/teams/late", nil)
	req.Header.Set("Authorization", "Bearer ok")
	w := httptest.NewRecorder()
	server.HTTPHandler(ps.srv).ServeHTTP(w, req)
	var st spb.Status
	if err := protojson.Unmarshal(w.Body.Bytes(), &st); err != nil || w.Code != http.StatusServiceUnavailable || st.GetCode() != 14 {
		t.Errorf("a call after Shutdown: HTTP %d %s (%v), want 503 with status UNAVAILABLE", w.Code, w.Body, err)
	}
	select {
	case <-teams.entered:
		t.Errorf("a call after Shutdown reached the handler")
	default:
	}
}

// TestShutdownDeadlineCutsInProcessCallsOff: when Shutdown's context ends
// with a REST call still running, the call's context is cancelled (as
// Stop cuts off calls on connections) and Shutdown returns.
func TestShutdownDeadlineCutsInProcessCallsOff(t *testing.T) {
	teams := newTeamsBlocking()
	ps := startProbeServer(t, teams)
	done := getAsync(ps.base + "/v1/teams/stuck")
	<-teams.entered

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- ps.srv.Shutdown(ctx) }()
	cancel()
	if err := <-stopped; err == nil {
		t.Errorf("Shutdown past its deadline returned no error")
	}
	close(teams.release) // the handler ends either way
	if err := <-teams.ended; err == nil {
		t.Errorf("the handler was released, want its context cancelled by Shutdown")
	}
	if r := <-done; r.err == nil && r.status == http.StatusOK {
		t.Errorf("the cut-off call answered 200: %s", r.body)
	}
}
