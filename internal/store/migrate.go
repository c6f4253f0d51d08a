package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gpuplane/gpuplane/migrations"
)

// migrationsTable is golang-migrate's default, in the connection's current
// schema; SchemaStatus reads it directly.
const migrationsTable = "schema_migrations"

// migrateLockTimeout is how long we wait for another process (a second
// replica starting at the same time) to finish migrating. golang-migrate's
// 15s default is too short for a slow migration.
const migrateLockTimeout = 10 * time.Minute

// MigrateUp applies all pending migrations embedded in package migrations.
// It is safe to run from several processes at once: golang-migrate
// serialises them with an advisory lock. dsn may be a postgres://,
// postgresql:// or pgx5:// URL or a keyword/value string. Cancelling ctx
// stops between migrations, not inside one.
func MigrateUp(ctx context.Context, dsn string) error {
	return withMigrate(ctx, dsn, func(m *migrate.Migrate) error {
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return migrateErr("up", err)
		}
		return nil
	})
}

// MigrateDown reverts steps migrations, or all of them when steps <= 0 or
// steps exceeds the number applied.
func MigrateDown(ctx context.Context, dsn string, steps int) error {
	return withMigrate(ctx, dsn, func(m *migrate.Migrate) error {
		var err error
		if steps <= 0 {
			err = m.Down()
		} else {
			err = m.Steps(-steps)
		}
		var short migrate.ErrShortLimit
		if err != nil && !errors.Is(err, migrate.ErrNoChange) && !errors.As(err, &short) {
			return migrateErr("down", err)
		}
		return nil
	})
}

// ForceVersion records version as applied and clears the dirty flag without
// running anything: the way out after a failed migration has been repaired
// by hand. version -1 means no migration applied.
func ForceVersion(ctx context.Context, dsn string, version int) error {
	return withMigrate(ctx, dsn, func(m *migrate.Migrate) error {
		if err := m.Force(version); err != nil {
			return migrateErr("force", err)
		}
		return nil
	})
}

// SchemaVersion returns the applied migration version (0 when none) and
// whether the last migration failed halfway (dirty).
func SchemaVersion(ctx context.Context, dsn string) (version uint, dirty bool, err error) {
	err = withMigrate(ctx, dsn, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			version, dirty, err = 0, false, nil
		}
		return err
	})
	return version, dirty, err
}

// SchemaStatus compares the database's migration version with the latest
// embedded one using an existing pool: cheap enough for a readiness probe.
// A database that was never migrated reports current 0.
func SchemaStatus(ctx context.Context, pool *pgxpool.Pool) (current, latest uint, dirty bool, err error) {
	latest, err = LatestSchemaVersion()
	if err != nil {
		return 0, 0, false, err
	}
	var v int64
	err = pool.QueryRow(ctx, "SELECT version, dirty FROM "+migrationsTable+" LIMIT 1").Scan(&v, &dirty)
	switch {
	case errors.Is(err, pgx.ErrNoRows), SQLState(err) == pgerrcode.UndefinedTable:
		return 0, latest, false, nil
	case err != nil:
		return 0, latest, false, fmt.Errorf("store: read schema version: %w", err)
	case v < 0:
		// golang-migrate stores -1 for "nothing applied" after a full down.
		return 0, latest, dirty, nil
	}
	return uint(v), latest, dirty, nil
}

var latestVersion = sync.OnceValues(func() (uint, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return 0, fmt.Errorf("store: read embedded migrations: %w", err)
	}
	var latest uint
	for _, e := range entries {
		m, err := source.Parse(e.Name())
		if err != nil {
			continue
		}
		latest = max(latest, m.Version)
	}
	return latest, nil
})

// LatestSchemaVersion is the highest migration version embedded in the
// binary.
func LatestSchemaVersion() (uint, error) { return latestVersion() }

func withMigrate(ctx context.Context, dsn string, fn func(*migrate.Migrate) error) error {
	// database/sql is what golang-migrate's pgx driver is built on; opening
	// it ourselves (rather than through a pgx5:// URL) accepts any DSN form
	// pgx does and lets us honour ctx while connecting.
	if rest, ok := strings.CutPrefix(dsn, "pgx5://"); ok {
		dsn = "postgres://" + rest
	}
	connCfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return parseDSNError(dsn, err)
	}
	db := stdlib.OpenDB(*connCfg)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return scrubbedError(dsn, "store: migrate: connect", err)
	}
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: migrationsTable})
	if err != nil {
		db.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		drv.Close()
		return fmt.Errorf("store: migrate: read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		src.Close()
		drv.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	m.LockTimeout = migrateLockTimeout
	defer m.Close() // closes src, drv and db

	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			m.GracefulStop <- true
		case <-done:
		}
	}()

	if err := fn(m); err != nil {
		return err
	}
	return ctx.Err()
}

func migrateErr(op string, err error) error {
	var dirty migrate.ErrDirty
	if errors.As(err, &dirty) {
		return fmt.Errorf("store: migrate %s: database is dirty at version %d (a migration failed halfway); "+
			"repair the schema by hand, then force the version: %w", op, dirty.Version, err)
	}
	return fmt.Errorf("store: migrate %s: %w", op, err)
}
