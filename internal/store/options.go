package store

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenOption adjusts the pool configuration Open builds.
type OpenOption func(*pgxpool.Config)

// WithTracer traces every connection's statements with t (e.g. an
// OpenTelemetry pgx tracer); nil leaves tracing off.
func WithTracer(t pgx.QueryTracer) OpenOption {
	return func(c *pgxpool.Config) {
		if t != nil {
			c.ConnConfig.Tracer = t
		}
	}
}
