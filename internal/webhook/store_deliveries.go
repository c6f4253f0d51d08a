package webhook

// The webhook_deliveries and webhook_dispatch tables: every statement on
// them is in this file.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/eventtype"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
)

// Delivery states.
const (
	StatePending   = "PENDING"
	StateSucceeded = "SUCCEEDED"
	StateFailed    = "FAILED"
)

// Delivery is one event for one subscription: a row of the delivery log.
type Delivery struct {
	ID             int64
	Subscription   string
	Position       int64
	EventID        int64 // the audit event
	EventType      string
	Resource       string
	State          string
	Attempts       int32
	NextAttempt    time.Time
	LastAttempt    *time.Time
	LastStatusCode int32
	LastError      string
	LastDuration   time.Duration
	Created        time.Time
	Completed      *time.Time
}

// Name is the API resource name.
func (d Delivery) Name() string { return Name(d.Subscription) + "/deliveries/" + itoa(d.ID) }

const deliveryColumns = `id, subscription_id, position, audit_id, event_type, resource, state, attempts,
	next_attempt_time, last_attempt_time, last_status_code, last_error, last_duration_ms, create_time, complete_time`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var d Delivery
	var ms int32
	err := row.Scan(&d.ID, &d.Subscription, &d.Position, &d.EventID, &d.EventType, &d.Resource, &d.State, &d.Attempts,
		&d.NextAttempt, &d.LastAttempt, &d.LastStatusCode, &d.LastError, &ms, &d.Created, &d.Completed)
	d.LastDuration = time.Duration(ms) * time.Millisecond
	return d, err
}

// dispatch turns the events after the dispatcher's position into
// deliveries, one per matching subscription, and moves the position on,
// in one transaction (dispatchers of every process take turns on the
// webhook_dispatch row). It returns how many deliveries it created and
// whether it read a full batch.
//
// Events at or before every subscription's start are owed to nobody (a
// subscription starts after the feed's head as of its creation, read
// after the dispatch pass running then has ended: lockDispatchShared), so
// the pass reads from there when the stored position lags behind. That is
// what lets a pass without subscriptions do nothing at all: no
// transaction, no row lock, no write and so no WAL flush, where it used to
// move the position past every change of an installation that uses no
// webhooks.
func dispatch(ctx context.Context, db *store.DB, batch int, lost func(from, to int64)) (int, bool, error) {
	if exists, err := anySubscription(ctx, db); err != nil || !exists {
		return 0, false, err
	}
	created, full := 0, false
	err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		created, full = 0, false
		var last int64
		if err := tx.QueryRow(ctx, `SELECT last_position FROM webhook_dispatch FOR UPDATE`).Scan(&last); err != nil {
			return err
		}
		subs, err := targets(ctx, tx)
		if err != nil || len(subs) == 0 {
			return err // deleted since the check above: nobody to deliver to
		}
		floor := subs[0].start
		for _, s := range subs[1:] {
			floor = min(floor, s.start)
		}
		last = max(last, floor)
		evs, err := events.Read(ctx, tx, last, batch)
		if err != nil || len(evs) == 0 {
			return err
		}
		full = len(evs) == batch
		if evs[0].Position != last+1 {
			lost(last+1, evs[0].Position-1)
		}
		var cols struct {
			subs, types, resources []string
			positions, ids         []int64
		}
		for _, e := range evs {
			for _, s := range subs {
				if e.Position <= s.start || !s.matches(e) {
					continue
				}
				cols.subs, cols.types, cols.resources = append(cols.subs, s.id), append(cols.types, e.Type), append(cols.resources, e.Resource)
				cols.positions, cols.ids = append(cols.positions, e.Position), append(cols.ids, e.ID)
			}
		}
		if len(cols.subs) > 0 {
			tag, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (subscription_id, position, audit_id, event_type, resource)
				SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[])
				ON CONFLICT (subscription_id, position) DO NOTHING`,
				cols.subs, cols.positions, cols.ids, cols.types, cols.resources)
			if err != nil {
				return err
			}
			created = int(tag.RowsAffected())
		}
		_, err = tx.Exec(ctx, `UPDATE webhook_dispatch SET last_position = $1`, evs[len(evs)-1].Position)
		return err
	})
	return created, full, err
}

// lockDispatchShared waits for a running dispatch pass and keeps the next
// one from starting until the caller's transaction ends (the pass takes
// the row FOR UPDATE).
func lockDispatchShared(ctx context.Context, tx *store.Tx) error {
	_, err := tx.Exec(ctx, `SELECT 1 FROM webhook_dispatch FOR SHARE`)
	return err
}

// matches: the event is in the subscription's scope and types.
func (t target) matches(e *events.Event) bool {
	switch {
	case t.team != "" && e.Team != t.team:
		return false
	case t.team == "" && t.department != "" && e.Department != t.department:
		return false
	}
	return eventtype.Matches(t.types, e.Type)
}

// claim leases up to n due deliveries for owner. A delivery is due when
// its subscription is enabled and not backing off, its own retry time has
// come, no unexpired lease holds it, and no earlier delivery of the same
// object to the same subscription is still pending (order per object).
// While a subscription is failing only one delivery of it is in flight
// (a probe), so a dead endpoint is not hammered.
func claim(ctx context.Context, db *store.DB, owner string, lease time.Duration, n int) ([]Delivery, error) {
	rows, err := db.Query(ctx, `
		UPDATE webhook_deliveries d SET lease_owner = $1, lease_expire_time = now() + $2::float8 * interval '1 millisecond',
		       attempts = d.attempts + 1, last_attempt_time = now()
		  FROM (SELECT w.id FROM webhook_deliveries w JOIN webhook_subscriptions s ON s.id = w.subscription_id
		         WHERE w.state = 'PENDING' AND w.next_attempt_time <= now()
		           AND (w.lease_expire_time IS NULL OR w.lease_expire_time < now())
		           AND NOT s.disabled AND (s.retry_after IS NULL OR s.retry_after <= now())
		           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e WHERE e.subscription_id = w.subscription_id
		                            AND e.resource = w.resource AND e.state = 'PENDING' AND e.position < w.position)
		           AND (s.consecutive_failures = 0 OR NOT EXISTS (SELECT 1 FROM webhook_deliveries l
		                WHERE l.subscription_id = s.id AND l.state = 'PENDING' AND l.lease_expire_time > now()))
		         ORDER BY w.position LIMIT $3 FOR UPDATE OF w SKIP LOCKED) due
		 WHERE d.id = due.id RETURNING `+prefixed("d.", deliveryColumns), owner, lease.Milliseconds(), n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) { return scanDelivery(r) })
}

// outcome is the result of one attempt.
type outcome struct {
	ok         bool
	statusCode int
	err        string
	duration   time.Duration
	// retryIn is when to try again after a failure; giveUp marks the
	// delivery FAILED instead.
	retryIn time.Duration
	giveUp  bool
}

// finish records an attempt of a delivery still leased by owner; false
// when the lease was lost meanwhile (another deliverer has it now).
func finish(ctx context.Context, tx *store.Tx, d Delivery, owner string, o outcome) (bool, error) {
	state := StatePending
	switch {
	case o.ok:
		state = StateSucceeded
	case o.giveUp:
		state = StateFailed
	}
	tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET state = $3, lease_owner = '', lease_expire_time = NULL,
		next_attempt_time = now() + $4::float8 * interval '1 millisecond', last_status_code = $5, last_error = $6,
		last_duration_ms = $7, complete_time = CASE WHEN $3 = 'PENDING' THEN NULL ELSE now() END
		WHERE id = $1 AND lease_owner = $2`,
		d.ID, owner, state, o.retryIn.Milliseconds(), o.statusCode, o.err, o.duration.Milliseconds())
	return tag.RowsAffected() == 1, err
}

// retryNow makes a subscription's pending deliveries due at once.
func retryNow(ctx context.Context, tx *store.Tx, subscription string) error {
	_, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_time = now()
		WHERE subscription_id = $1 AND state = 'PENDING' AND next_attempt_time > now()`, subscription)
	return err
}

// Redeliver queues a delivery again (same event id), whatever its state;
// its attempts count starts over.
func Redeliver(ctx context.Context, tx *store.Tx, subscription string, id int64) (Delivery, error) {
	d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE webhook_deliveries SET state = 'PENDING', attempts = 0,
		next_attempt_time = now(), complete_time = NULL WHERE id = $1 AND subscription_id = $2 RETURNING `+deliveryColumns,
		id, subscription))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, errs.NotFound(Name(subscription) + "/deliveries/" + itoa(id))
	}
	return d, err
}

var deliveryFilter = filter.Schema{
	"state":      {Column: "state", Type: filter.Enum, Enum: []string{StatePending, StateSucceeded, StateFailed}},
	"event_type": {Column: "event_type", Type: filter.String},
	"resource":   {Column: "resource", Type: filter.String},
}

// CheckDeliveryList validates a delivery list's page size and filter.
func CheckDeliveryList(pageSize int32, filterExpr string) error {
	_, err := store.NewList(pageSize, filterExpr, deliveryFilter)
	return err
}

// FirstPage is the Before of the first page of ListDeliveries.
const FirstPage = int64(1<<63 - 1)

// ListDeliveries returns a page of a subscription's deliveries, newest
// first, and whether more follow.
func ListDeliveries(ctx context.Context, q store.Querier, subscription string, pageSize int32, filterExpr string, before int64) ([]Delivery, bool, error) {
	lq, err := store.NewList(pageSize, filterExpr, deliveryFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("subscription_id = " + lq.Arg(subscription))
	lq.Where("id < " + lq.Arg(before))
	return store.FetchPage(ctx, q, lq, `SELECT `+deliveryColumns+` FROM webhook_deliveries`, "id DESC", scanDelivery)
}

// pruneDeliveries deletes finished deliveries completed before cutoff.
func pruneDeliveries(ctx context.Context, db *store.DB, cutoff time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries
		WHERE create_time < $1 AND state <> 'PENDING' LIMIT 10000)`, cutoff)
	return tag.RowsAffected(), err
}

// PendingCount counts deliveries not yet delivered (metrics, tests).
func PendingCount(ctx context.Context, q store.Querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'PENDING'`).Scan(&n)
	return n, err
}

func prefixed(prefix, columns string) string {
	out := []byte{}
	start := true
	for i := 0; i < len(columns); i++ {
		c := columns[i]
		if start && c != ' ' && c != '\n' && c != '\t' {
			out = append(out, prefix...)
			start = false
		}
		out = append(out, c)
		if c == ',' {
			start = true
		}
	}
	return string(out)
}
