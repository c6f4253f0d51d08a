package store

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/store/filter"
)

// ListQuery collects the conditions and arguments of one keyset-paginated
// list query, so handlers never count placeholders by hand.
type ListQuery struct {
	// Size is the validated page size.
	Size  int
	args  []any
	conds []string
}

// NewList validates the page size and compiles the filter against schema;
// both errors are INVALID_ARGUMENT on page_size / filter.
func NewList(pageSize int32, filterExpr string, schema filter.Schema) (*ListQuery, error) {
	size, err := PageSize(pageSize)
	if err != nil {
		return nil, err
	}
	where, args, err := filter.Compile(filterExpr, schema, 1)
	if err != nil {
		return nil, err
	}
	return &ListQuery{Size: size, args: args, conds: []string{"(" + where + ")"}}, nil
}

// Arg adds a query argument and returns its placeholder ("$3").
func (q *ListQuery) Arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// Where adds a condition; conditions are joined with AND.
func (q *ListQuery) Where(cond string) { q.conds = append(q.conds, "("+cond+")") }

// FetchPage runs `selectFrom WHERE <conditions> ORDER BY orderBy LIMIT
// size+1` and returns at most Size rows and whether more follow (the extra
// row only tells that a next page exists).
func FetchPage[T any](ctx context.Context, db Querier, q *ListQuery, selectFrom, orderBy string, scan func(pgx.Row) (T, error)) ([]T, bool, error) {
	sql := selectFrom + " WHERE " + strings.Join(q.conds, " AND ") + " ORDER BY " + orderBy + " LIMIT " + q.Arg(q.Size+1)
	rows, err := db.Query(ctx, sql, q.args...)
	if err != nil {
		return nil, false, Classify(err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, false, err
	}
	if len(list) > q.Size {
		return list[:q.Size], true, nil
	}
	return list, false, nil
}
