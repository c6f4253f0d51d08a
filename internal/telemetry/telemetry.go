// Package telemetry holds gpuplane's OpenTelemetry plumbing: the tracer
// provider built from the standard OTEL_* environment (off unless asked
// for), the W3C trace-context helpers that carry a trace from the API into
// the worker through reconcile_work.trace_parent, a pgx tracer, a slog
// handler that stamps trace ids on log records, and Prometheus collectors
// that read their samples from PostgreSQL at scrape time.
//
// Every instrumented component receives its trace.TracerProvider
// explicitly; nothing here installs OpenTelemetry globals, so tests can run
// several servers with different providers in one process.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const ServiceName = "gpuplane"

// Attribute keys gpuplane sets on its own spans.
const (
	AttrRequestID      = attribute.Key("gpuplane.request_id")
	AttrSubject        = attribute.Key("gpuplane.subject")
	AttrVirtualCluster = attribute.Key("gpuplane.virtual_cluster")
	AttrAttempt        = attribute.Key("gpuplane.reconcile.attempt")
	AttrKind           = attribute.Key("gpuplane.reconcile.kind")
	AttrOutcome        = attribute.Key("gpuplane.reconcile.outcome")
	AttrStep           = attribute.Key("gpuplane.reconcile.step")
)

// Propagator is the context propagation gpuplane speaks on the wire and
// stores in reconcile_work: W3C trace context and baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// OrNoop returns tp, or a provider that records nothing when tp is nil.
func OrNoop(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}

// Tracing reports whether tp records anything: false for nil and for the
// no-op provider (tracing off, the default). Instrumentation is installed
// only then: with tracing off a request runs no span, propagation or
// attribute code at all, which on a small call is a tenth of its CPU.
func Tracing(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}

// ExportEnabled reports whether the environment asks for span export:
// tracing is off by default and turns on when OTEL_TRACES_EXPORTER or an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is set. OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off.
func ExportEnabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	exp := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")))
	if exp == "none" {
		return false
	}
	return exp != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewTracerProvider builds the tracer provider the OTEL_* environment asks
// for. Without any (the default) it returns a no-op provider and a no-op
// shutdown. Otherwise spans go, batched, to an OTLP exporter configured by
// the exporter's own environment variables (endpoint, headers, TLS,
// timeout, compression); OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL picks grpc or
// http/protobuf (the default). Sampling follows OTEL_TRACES_SAMPLER
// (default parentbased_always_on) and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. component ("serve", "worker") becomes the
// gpuplane.component resource attribute. Export errors are logged to log.
//
// shutdown flushes what is buffered; call it last when stopping.
func NewTracerProvider(ctx context.Context, component string, log *slog.Logger) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	nop := func(context.Context) error { return nil }
	if !ExportEnabled() {
		return noop.NewTracerProvider(), nop, nil
	}
	exporter, err := newExporter(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName), attribute.String("gpuplane.component", component)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		// Last, so the environment wins over the defaults above.
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exporter.Shutdown(ctx)
		return nil, nil, fmt.Errorf("opentelemetry resource: %w", err)
	}
	if log != nil {
		// The SDK reports export failures through the global error handler;
		// route them to our log instead of the standard library logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("opentelemetry", "error", err)
		}))
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}

func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	exp := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")))
	if exp != "" && exp != "otlp" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q is not supported: use otlp or none", exp)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.ToLower(strings.TrimSpace(proto)) {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q is not supported: use grpc or http/protobuf", proto)
	}
}

// TraceParent returns the W3C traceparent of the span in ctx, or "" when
// ctx carries no valid span context.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}

// ContextWithTraceParent returns ctx carrying the remote span context
// encoded in traceParent (as stored by TraceParent); an empty or malformed
// value leaves ctx unchanged.
func ContextWithTraceParent(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceParent})
}

// EndSpan records err (if any) on span and ends it.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
