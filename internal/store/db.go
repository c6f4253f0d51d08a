package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Querier runs statements: a *DB (each statement on its own) or a *Tx.
// Only the repositories (one per table, beside their domain package) call
// it with SQL; everything else reaches the database through them.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is the database: the connection pool plus callback transactions
// (InTx). It is a Querier for single statements outside a transaction.
type DB struct {
	pool    *pgxpool.Pool
	commits *CommitSignal
	groups  groups      // InGroupTx
	shared  sharedReads // SendShared
}

// DBOption configures New.
type DBOption func(*DB)

// WithCommitSignal makes InTx notify sig after each commit of a
// transaction that called Tx.SignalCommit.
func WithCommitSignal(sig *CommitSignal) DBOption { return func(db *DB) { db.commits = sig } }

// New wraps a pool (from Open).
func New(pool *pgxpool.Pool, opts ...DBOption) *DB {
	db := &DB{pool: pool}
	for _, o := range opts {
		o(db)
	}
	return db
}

// CommitSignal tells one waiter that transactions it cares about have
// committed (the change feed's sequencer: audit events were written).
// Signals coalesce: many commits while the waiter is busy wake it once.
type CommitSignal struct{ c chan struct{} }

// NewCommitSignal makes a signal for WithCommitSignal.
func NewCommitSignal() *CommitSignal { return &CommitSignal{c: make(chan struct{}, 1)} }

// Notify wakes the waiter; it never blocks.
func (s *CommitSignal) Notify() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// C is where the waiter waits.
func (s *CommitSignal) C() <-chan struct{} { return s.c }

// Pool is the underlying pool (migrations, health checks, metrics).
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Exec implements Querier.
func (db *DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return db.pool.Exec(ctx, sql, args...)
}

// Query implements Querier.
func (db *DB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return db.pool.Query(ctx, sql, args...)
}

// QueryRow implements Querier.
func (db *DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return db.pool.QueryRow(ctx, sql, args...)
}

// Scope limits a list to what a caller may read: everything (All), or rows
// of the given teams and of the given departments. Repositories turn it
// into their own SQL.
type Scope struct {
	All         bool
	Teams       []string
	Departments []string
}

// CountBy runs a "SELECT label, count(*) ... GROUP BY label" query for a
// repository and returns the counts by label.
func CountBy(ctx context.Context, q Querier, sql string, args ...any) (map[string]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	counts := map[string]int64{}
	var label string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&label, &n}, func() error { counts[label] = n; return nil })
	return counts, err
}

// GetOne runs a single-row SELECT for a repository, adding FOR UPDATE when
// lock is set; no row is notFound.
func GetOne[T any](ctx context.Context, q Querier, sql string, lock bool, scan func(pgx.Row) (T, error), notFound error, args ...any) (T, error) {
	if lock {
		sql += ` FOR UPDATE`
	}
	v, err := scan(q.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, notFound
	}
	return v, err
}
