package server

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/telemetry"
)

// Tracing: otelhttp spans on the HTTP listener, otelgrpc spans on the gRPC
// server and on the gateway's client side (which carries the HTTP span's
// context into the gRPC call; in-process calls run both stats handlers), and the request id and subject on
// the gRPC server span. Metrics stay with Prometheus; the OpenTelemetry
// instrumentations get a no-op meter.

// untracedGRPC: health checks (probes) would only add noise.
func untracedGRPC(info *stats.RPCTagInfo) bool {
	return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/")
}

// grpcServerTracing is the gRPC server's stats handler; in-process calls
// (inprocess.go) run it too.
func grpcServerTracing(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(telemetry.OrNoop(tp)),
		otelgrpc.WithPropagators(telemetry.Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(untracedGRPC),
	)
}

// grpcClientTracing is the gateway's client stats handler, on the loopback
// connection and for in-process calls alike.
func grpcClientTracing(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(telemetry.OrNoop(tp)),
		otelgrpc.WithPropagators(telemetry.Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}

// httpTracing traces HTTP requests except the probe and scrape endpoints
// (h as it is with tracing off).
func httpTracing(tp trace.TracerProvider, h http.Handler) http.Handler {
	if !telemetry.Tracing(tp) {
		return h
	}
	return otelhttp.NewHandler(h, "gpuplane.http",
		otelhttp.WithTracerProvider(telemetry.OrNoop(tp)),
		otelhttp.WithPropagators(telemetry.Propagator()),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				return false
			}
			return true
		}),
	)
}

// annotateSpan runs inside unaryChain (after the request id is assigned and
// the caller authenticated) and puts both on the RPC's span.
func annotateSpan(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	annotate(ctx)
	return handler(ctx, req)
}

func annotate(ctx context.Context) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(telemetry.AttrRequestID.String(reqctx.CorrelationID(ctx)))
		if p, ok := reqctx.PrincipalFrom(ctx); ok {
			span.SetAttributes(telemetry.AttrSubject.String(p.Subject))
		}
	}
}
