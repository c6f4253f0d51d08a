package telemetry

import (
	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// PGXTracer traces SQL statements as client spans (db.query.text holds the
// statement with $n placeholders, never the arguments). Statements run
// outside a recorded span (pool health checks, the worker's idle polling,
// metric scrapes) produce none. Pool acquisition is not traced. Spans are
// named "query SELECT", "prepare SELECT", "batch"... Nil with tracing off.
func PGXTracer(tp trace.TracerProvider) pgx.QueryTracer {
	if !Tracing(tp) {
		return nil
	}
	return otelpgx.NewTracer(
		otelpgx.WithTracerProvider(OrNoop(tp)),
		otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelpgx.WithDisableAcquireTracer(),
		// "query SELECT" with its "prepare SELECT" child, not two "SELECT"s.
		otelpgx.WithQuerySpanNamePrefix(),
	)
}
