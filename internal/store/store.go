// Package store is the PostgreSQL plumbing shared by the repositories: the
// connection pool (DB), typed callback transactions (Tx) that retry on
// serialization failures, SQLSTATE classification into internal/errs,
// keyset list queries and page tokens, etags, the idempotency_keys table
// and schema migrations. It knows nothing about the domain: each table's
// SQL lives in the repository file of the package that owns it
// (virtualcluster, request, tenancy, workqueue, audit).
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultMaxConns is used by Open when maxConns is not positive.
const DefaultMaxConns = 10

// Open connects a pool to dsn (URL or keyword/value form) and pings it, so a
// bad DSN or unreachable server fails at startup rather than on the first
// request.
//
// Options (WithTracer) adjust the pool configuration.
func Open(ctx context.Context, dsn string, maxConns int32, opts ...OpenOption) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, parseDSNError(dsn, err)
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	cfg.MaxConns = maxConns
	// Recycling connections lets server-side memory (plan caches, etc.) go
	// and spreads reconnects over time after a failover.
	cfg.MaxConnLifetime = time.Hour
	cfg.MaxConnLifetimeJitter = 5 * time.Minute
	cfg.MaxConnIdleTime = 10 * time.Minute
	cfg.HealthCheckPeriod = 30 * time.Second
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		// Makes our sessions recognisable in pg_stat_activity.
		cfg.ConnConfig.RuntimeParams["application_name"] = "gpuplane"
	}

	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, scrubbedError(dsn, "store: create pool", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, scrubbedError(dsn, fmt.Sprintf("store: connect to %s:%d/%s",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database), err)
	}
	return pool, nil
}
