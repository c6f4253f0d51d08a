package webhook

// The webhook_subscriptions table: every statement on it is in this file.
// Reads join teams for a team subscription's department (its scope).

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
)

const subscriptionColumns = `s.id, coalesce(s.team_id, ''), coalesce(s.department_id, t.department_id, ''), s.display_name,
	s.url, s.event_types, s.secret, coalesce(s.previous_secret, ''), s.previous_secret_expire_time, s.disabled,
	s.disabled_reason, s.start_position, s.consecutive_failures, s.retry_after, s.version, s.create_time, s.update_time`

const subscriptionFrom = ` FROM webhook_subscriptions s LEFT JOIN teams t ON t.id = s.team_id`

func scanSubscription(row pgx.Row) (Subscription, error) {
	var s Subscription
	err := row.Scan(&s.ID, &s.Team, &s.Department, &s.DisplayName, &s.URL, &s.EventTypes, &s.Secret, &s.PreviousSecret,
		&s.PreviousSecretExpire, &s.Disabled, &s.DisabledReason, &s.StartPosition, &s.ConsecutiveFailures, &s.RetryAfter,
		&s.Version, &s.Created, &s.Updated)
	return s, err
}

// Get reads a subscription; lock takes a row lock (in a Tx).
func Get(ctx context.Context, q store.Querier, id string, lock bool) (Subscription, error) {
	sql := `SELECT ` + subscriptionColumns + subscriptionFrom + ` WHERE s.id = $1`
	if lock {
		sql += ` FOR UPDATE OF s`
	}
	s, err := scanSubscription(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, errs.NotFound(Name(id))
	}
	return s, err
}

// feedHead is where a new subscription starts: the feed's last position.
func feedHead(ctx context.Context, q store.Querier) (int64, error) {
	b, err := events.ReadBounds(ctx, q)
	return b.Last, err
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func insert(ctx context.Context, tx *store.Tx, s Subscription) (Subscription, error) {
	dept := s.Department
	if s.Team != "" {
		dept = "" // a team subscription's department is its team's
	}
	types := s.EventTypes
	if types == nil {
		types = []string{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO webhook_subscriptions (id, team_id, department_id, display_name, url, event_types,
		secret, disabled, start_position) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		s.ID, nullable(s.Team), nullable(dept), s.DisplayName, s.URL, types, s.Secret, s.Disabled, s.StartPosition)
	if store.SQLState(err) == "23505" {
		return s, errs.AlreadyExists(Name(s.ID))
	}
	if err != nil {
		return s, err
	}
	return Get(ctx, tx, s.ID, false)
}

func update(ctx context.Context, tx *store.Tx, s Subscription) (Subscription, error) {
	types := s.EventTypes
	if types == nil {
		types = []string{}
	}
	_, err := tx.Exec(ctx, `UPDATE webhook_subscriptions SET display_name = $2, url = $3, event_types = $4, secret = $5,
		previous_secret = $6, previous_secret_expire_time = $7, disabled = $8, disabled_reason = $9,
		consecutive_failures = $10, retry_after = $11, version = version + 1, update_time = now() WHERE id = $1`,
		s.ID, s.DisplayName, s.URL, types, s.Secret, nullable(s.PreviousSecret), s.PreviousSecretExpire, s.Disabled,
		s.DisabledReason, s.ConsecutiveFailures, s.RetryAfter)
	if err != nil {
		return s, err
	}
	return Get(ctx, tx, s.ID, false)
}

func deleteSubscription(ctx context.Context, tx *store.Tx, id string) error {
	_, err := tx.Exec(ctx, `DELETE FROM webhook_subscriptions WHERE id = $1`, id)
	return err
}

// ListOptions select a page of subscriptions.
type ListOptions struct {
	PageSize int32
	Filter   string
	After    string
	// Scope limits the list to what the caller manages: everything (All),
	// subscriptions of these teams, and of these departments (department
	// subscriptions and their teams').
	Scope store.Scope
}

var listFilter = filter.Schema{
	"team":       {Column: "coalesce(s.team_id, '')", Type: filter.String, Strip: "teams/"},
	"department": {Column: "coalesce(s.department_id, t.department_id, '')", Type: filter.String, Strip: "departments/"},
	"disabled":   {Column: "s.disabled", Type: filter.Bool},
}

// CheckList validates a list's page size and filter.
func CheckList(o ListOptions) error {
	_, err := store.NewList(o.PageSize, o.Filter, listFilter)
	return err
}

// List returns a page of subscriptions by id, and whether more follow.
// Team owners see their teams', department admins their departments'
// (and their teams'), platform admins all.
func List(ctx context.Context, q store.Querier, o ListOptions) ([]Subscription, bool, error) {
	lq, err := store.NewList(o.PageSize, o.Filter, listFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("s.id > " + lq.Arg(o.After))
	if !o.Scope.All {
		lq.Where("s.team_id = ANY(" + lq.Arg(o.Scope.Teams) + ") OR coalesce(s.department_id, t.department_id) = ANY(" +
			lq.Arg(o.Scope.Departments) + ")")
	}
	return store.FetchPage(ctx, q, lq, `SELECT `+subscriptionColumns+subscriptionFrom, "s.id", scanSubscription)
}

// target is what the dispatcher needs of a subscription.
type target struct {
	id, team, department string
	types                []string
	start                int64
}

func targets(ctx context.Context, q store.Querier) ([]target, error) {
	rows, err := q.Query(ctx, `SELECT s.id, coalesce(s.team_id, ''), coalesce(s.department_id, t.department_id, ''),
		s.event_types, s.start_position`+subscriptionFrom)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (target, error) {
		var t target
		err := r.Scan(&t.id, &t.team, &t.department, &t.types, &t.start)
		return t, err
	})
}

// anySubscription says whether a subscription exists (dispatch's cheap
// check before it takes the dispatch row and reads targets). It runs on
// every wake-up of the feed, so it is a shared read (store.DB.QueryRowShared):
// it rides the round trip of whoever reads at the same moment.
func anySubscription(ctx context.Context, db *store.DB) (bool, error) {
	var exists bool
	err := db.QueryRowShared(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_subscriptions)`).Scan(&exists)
	return exists, err
}

// failed counts a failed delivery: the subscription backs off for
// backoff(failures), and is disabled with reason once failures reaches
// disableAfter (0: never). It reports the new count and whether this
// failure disabled it.
func failed(ctx context.Context, tx *store.Tx, id string, backoff func(failures int32) time.Duration, disableAfter int32, reason func(int32) string) (Subscription, bool, error) {
	cur, err := Get(ctx, tx, id, true)
	if err != nil {
		return cur, false, err
	}
	n := cur.ConsecutiveFailures + 1
	disable := !cur.Disabled && disableAfter > 0 && n >= disableAfter
	why := cur.DisabledReason
	if disable {
		why = reason(n)
	}
	_, err = tx.Exec(ctx, `UPDATE webhook_subscriptions SET consecutive_failures = $2,
		retry_after = now() + $3::float8 * interval '1 millisecond', disabled = disabled OR $4, disabled_reason = $5,
		version = version + CASE WHEN $4 THEN 1 ELSE 0 END, update_time = CASE WHEN $4 THEN now() ELSE update_time END
		WHERE id = $1`, id, n, backoff(n).Milliseconds(), disable, why)
	if err != nil {
		return cur, false, err
	}
	if !disable {
		return cur, false, nil
	}
	after, err := Get(ctx, tx, id, false)
	return after, true, err
}

// succeeded clears a subscription's failure run; when there was one, its
// waiting deliveries are due at once.
func succeeded(ctx context.Context, tx *store.Tx, id string) error {
	tag, err := tx.Exec(ctx, `UPDATE webhook_subscriptions SET consecutive_failures = 0, retry_after = NULL
		WHERE id = $1 AND (consecutive_failures > 0 OR retry_after IS NOT NULL)`, id)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	return retryNow(ctx, tx, id)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
