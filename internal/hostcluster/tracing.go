package hostcluster

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/client-go/rest"
)

// tracerName is the instrumentation scope of hostcluster's own spans.
const tracerName = "github.com/gpuplane/gpuplane/internal/hostcluster"

// traceTransport wraps config's transport so every request made within a
// traced context becomes a client span (named "k8s <verb> <resource>") and
// carries the W3C traceparent to the API server. Requests outside any trace
// (Helm internals, discovery refreshes) are not traced, so they do not start
// traces of their own. It returns the tracer for hostcluster's own spans.
func traceTransport(config *rest.Config, tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return noop.NewTracerProvider().Tracer(tracerName)
	}
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt,
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
			otelhttp.WithFilter(func(r *http.Request) bool { return trace.SpanContextFromContext(r.Context()).IsValid() }),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "k8s " + r.Method + " " + apiResource(r.URL.Path) }),
		)
	})
	return tp.Tracer(tracerName)
}

// apiResource names the resource of a Kubernetes API path without object
// names, so span names stay low-cardinality:
// /api/v1/namespaces/ns/secrets/x -> "secrets",
// /apis/g/v1/queues/q/status -> "queues/status", /api/v1/namespaces/ns -> "namespaces".
func apiResource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path // discovery (/api, /apis, /version) and anything else
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:] // namespaced resource
	}
	if len(parts) == 0 {
		return path
	}
	res := parts[0]
	if len(parts) >= 3 {
		res += "/" + parts[2] // subresource
	}
	return res
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
