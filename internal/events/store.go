package events

// The event_feed and event_positions tables: every statement on them is in
// this file. The feed reads the audit_events rows it positions (their
// event_type column marks them); audit.Record writes those rows.

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/store"
)

// Channel is the PostgreSQL notification channel the sequencer notifies
// (with the last position) after positioning events, so hubs and
// dispatchers in every process wake at once. Only the sequencer, which is
// one transaction at a time anyway, sends it: writers never do (NOTIFY
// would serialise their commits).
const Channel = "gpuplane_events"

// PassResult is what one sequencer pass did.
type PassResult struct {
	positioned int   // events given a position
	last       int64 // the feed's last position afterwards
	full       bool  // the batch limit was reached: run again at once
}

// Positioned is how many events the pass gave a position.
func (p PassResult) Positioned() int { return p.positioned }

// sequence gives the next committed, unpositioned events their positions,
// in audit id order. Sequencers of every process serialise on the
// event_feed row lock; the statement that picks the events runs after the
// lock is taken, so its snapshot sees every batch committed before it.
// Events of transactions still running are invisible to it and get later
// positions once they commit: a reader at position p has then seen every
// event committed before the batch that holds p, and nothing is skipped.
func sequence(ctx context.Context, db *store.DB, limit int) (PassResult, error) {
	var out PassResult
	err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		out = PassResult{}
		// The highest audit id committed before this transaction has an
		// xid (read COMMITTED, so its own snapshot). A writer that drew an
		// id at or below it drew it earlier, and writers take their xid
		// before their id (audit.Record), so every such writer's xid is
		// below the xid this transaction takes next: that pair is a safe
		// low-water candidate. (A snapshot's xmax is not: it is the last
		// completed xid + 1, and running writers with higher xids are in
		// neither its xmin nor its xip.)
		var preMax int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM audit_events`).Scan(&preMax); err != nil {
			return err
		}
		var last, low, candID, candXmax int64
		if err := tx.QueryRow(ctx, `SELECT last_position, low_water, candidate_id, candidate_xmax
			FROM event_feed FOR UPDATE`).Scan(&last, &low, &candID, &candXmax); err != nil {
			return err
		}
		var n, xmin, ownXID int64
		// Both sides of the anti-join start at the low-water mark ($1,
		// repeated inside NOT EXISTS), so whichever join the planner picks
		// reads only what follows it: without the inner bound a merge
		// anti-join read every position from the first one, and a plan
		// made while the tables were small hashed both of them whole,
		// costing a pass O(history).
		err := tx.QueryRow(ctx, `
			WITH batch AS (
			  SELECT a.id, row_number() OVER (ORDER BY a.id) AS rn
			    FROM audit_events a
			   WHERE a.id > $1 AND a.event_type IS NOT NULL
			     AND NOT EXISTS (SELECT 1 FROM event_positions p WHERE p.audit_id = a.id AND p.audit_id > $1)
			   ORDER BY a.id LIMIT $2),
			ins AS (
			  INSERT INTO event_positions (position, audit_id)
			  SELECT $3 + rn, id FROM batch RETURNING position)
			SELECT (SELECT count(*) FROM ins),
			       pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
			       pg_current_xact_id()::text::bigint`,
			low, limit, last).Scan(&n, &xmin, &ownXID)
		if err != nil {
			return err
		}
		out.positioned, out.last, out.full = int(n), last+n, int(n) == limit
		// Every transaction that could still add an audit row with an id up
		// to candID has an xid below candXmax (see preMax). This pass's
		// snapshot was taken after the candidate's transaction committed,
		// so those xids are below its xmax and any still running would hold
		// xmin below candXmax. Once none is left and this pass (not cut
		// short by the limit) positioned every visible row above low,
		// nothing at or below candID is left to position.
		if candXmax != 0 && xmin >= candXmax && !out.full {
			low = max(low, candID)
			candXmax = 0
		}
		if candXmax == 0 {
			candID, candXmax = preMax, ownXID
		}
		if _, err := tx.Exec(ctx, `UPDATE event_feed SET last_position = $1, low_water = $2,
			candidate_id = $3, candidate_xmax = $4`, out.last, low, candID, candXmax); err != nil {
			return err
		}
		if n > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, strconv.FormatInt(out.last, 10))
		}
		return err
	})
	return out, err
}

// prune drops positions sequenced before cutoff (the audit rows stay) and
// returns the new first position. first_position moves before the rows
// go, and readers check that positions follow each other, so a reader
// never mistakes a pruned range for "nothing happened".
func prune(ctx context.Context, db *store.DB, cutoff time.Time, batch int) (int64, error) {
	var keep int64
	err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		var last int64
		if err := tx.QueryRow(ctx, `SELECT last_position FROM event_feed FOR UPDATE`).Scan(&last); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT position FROM event_positions WHERE sequence_time >= $1
			ORDER BY sequence_time LIMIT 1`, cutoff).Scan(&keep)
		if errors.Is(err, pgx.ErrNoRows) {
			keep = last + 1
		} else if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `UPDATE event_feed SET first_position = greatest(first_position, $1)
			RETURNING first_position`, keep).Scan(&keep)
	})
	if err != nil {
		return 0, err
	}
	for {
		tag, err := db.Exec(ctx, `DELETE FROM event_positions WHERE position IN (
			SELECT position FROM event_positions WHERE position < $1 ORDER BY position LIMIT $2)`, keep, batch)
		if err != nil {
			return keep, err
		}
		if tag.RowsAffected() < int64(batch) {
			return keep, nil
		}
	}
}

// Bounds are the positions the feed holds: events first..last (none when
// first > last). A watch may resume from any position in first-1..last.
type Bounds struct {
	First, Last int64
}

const boundsSQL = `SELECT first_position, last_position FROM event_feed`

// ReadBounds reads the feed's bounds.
func ReadBounds(ctx context.Context, q store.Querier) (Bounds, error) {
	var b Bounds
	err := q.QueryRow(ctx, boundsSQL).Scan(&b.First, &b.Last)
	return b, err
}

// readBoundsShared is ReadBounds outside a transaction as a shared read
// (store.DB.QueryRowShared): the hub reads the bounds on every wake-up, at
// the same moments as other readers, so it rides their round trip.
func readBoundsShared(ctx context.Context, db *store.DB) (Bounds, error) {
	var b Bounds
	err := db.QueryRowShared(ctx, boundsSQL).Scan(&b.First, &b.Last)
	return b, err
}

// unsequenced are the audit ids of committed events that have no position
// yet, as q (a snapshot) sees them.
func unsequenced(ctx context.Context, q store.Querier) (map[int64]bool, error) {
	rows, err := q.Query(ctx, `
		SELECT a.id FROM audit_events a
		 WHERE a.id > (SELECT low_water FROM event_feed) AND a.event_type IS NOT NULL
		   AND NOT EXISTS (SELECT 1 FROM event_positions p WHERE p.audit_id = a.id
		                   AND p.audit_id > (SELECT low_water FROM event_feed))`)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	out := make(map[int64]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, err
}

// Read returns up to limit events after position, in position order.
func Read(ctx context.Context, q store.Querier, after int64, limit int) ([]*Event, error) {
	rows, err := q.Query(ctx, `
		SELECT p.position, a.id, a.event_type, a.resource, a.team_id, a.department_id, a.actor,
		       a.time, a.correlation_id, a.before, a.after
		  FROM event_positions p JOIN audit_events a ON a.id = p.audit_id
		 WHERE p.position > $1 ORDER BY p.position LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Event, error) {
		var e Event
		var before, after []byte
		err := row.Scan(&e.Position, &e.ID, &e.Type, &e.Resource, &e.Team, &e.Department, &e.Actor,
			&e.Time, &e.CorrelationID, &before, &after)
		e.Before, e.After = json.RawMessage(before), json.RawMessage(after)
		return &e, err
	})
}

// ReadAt reads the event of audit row id, which has the given position
// (webhook deliveries keep both, and build their body from the audit row,
// which outlives the position's retention).
func ReadAt(ctx context.Context, q store.Querier, auditID, position int64) (*Event, error) {
	e := Event{Position: position}
	var before, after []byte
	err := q.QueryRow(ctx, `
		SELECT id, event_type, resource, team_id, department_id, actor, time, correlation_id, before, after
		  FROM audit_events WHERE id = $1 AND event_type IS NOT NULL`, auditID).Scan(&e.ID, &e.Type, &e.Resource,
		&e.Team, &e.Department, &e.Actor, &e.Time, &e.CorrelationID, &before, &after)
	e.Before, e.After = json.RawMessage(before), json.RawMessage(after)
	return &e, err
}
