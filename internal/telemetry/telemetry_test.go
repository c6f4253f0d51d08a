package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/gpuplane/gpuplane/internal/telemetry"
)

func clearOTELEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
}

func TestExportOffByDefault(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"exporter none wins", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clearOTELEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if got := telemetry.ExportEnabled(); got != c.want {
				t.Errorf("ExportEnabled = %v, want %v", got, c.want)
			}
			tp, shutdown, err := telemetry.NewTracerProvider(context.Background(), "test", slog.Default())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = shutdown(context.Background()) }()
			_, isSDK := tp.(*sdktrace.TracerProvider)
			if isSDK != c.want {
				t.Errorf("NewTracerProvider built an SDK provider: %v, want %v", isSDK, c.want)
			}
		})
	}
}

func TestUnsupportedExporterIsAnError(t *testing.T) {
	clearOTELEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, _, err := telemetry.NewTracerProvider(context.Background(), "test", nil); err == nil {
		t.Error("OTEL_TRACES_EXPORTER=zipkin accepted")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, _, err := telemetry.NewTracerProvider(context.Background(), "test", nil); err == nil {
		t.Error("OTEL_EXPORTER_OTLP_PROTOCOL=http/json accepted")
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	if got := telemetry.TraceParent(context.Background()); got != "" {
		t.Errorf("TraceParent without a span = %q", got)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "enqueue")
	defer span.End()
	parent := telemetry.TraceParent(ctx)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if parent != want {
		t.Fatalf("TraceParent = %q, want %q", parent, want)
	}
	remote := trace.SpanContextFromContext(telemetry.ContextWithTraceParent(context.Background(), parent))
	if !remote.IsRemote() || remote.TraceID() != span.SpanContext().TraceID() || remote.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("ContextWithTraceParent = %+v", remote)
	}
	if sc := trace.SpanContextFromContext(telemetry.ContextWithTraceParent(context.Background(), "garbage")); sc.IsValid() {
		t.Errorf("a malformed traceparent gave %+v", sc)
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(&buf, nil))).With("component", "x")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "traced")
	span.End()
	log.Info("untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log: %q", buf.String())
	}
	if !strings.Contains(lines[0], "trace_id="+span.SpanContext().TraceID().String()) ||
		!strings.Contains(lines[0], "span_id="+span.SpanContext().SpanID().String()) || !strings.Contains(lines[0], "component=x") {
		t.Errorf("traced record: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("untraced record: %s", lines[1])
	}
}
