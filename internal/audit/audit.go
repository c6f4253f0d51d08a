// Package audit owns the audit_events table: events are written inside the
// caller's transaction, so a change and its record commit or roll back
// together, and listed newest first. The API call's correlation id comes
// from the context (reqctx), never from the caller.
package audit

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/eventtype"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// Event is one change.
type Event struct {
	Actor      reqctx.Principal
	Action     string // e.g. "CreateTeam"
	Resource   string // e.g. "teams/team-a"
	RequestID  string // the caller's idempotency key
	Department string // scope for reads (department id)
	Team       string // scope for reads (team id)
	// Before and After are snapshots of the resource as the API renders it
	// (the domain types' Snapshot methods); nil leaves the column NULL.
	Before, After any
	// EventType is the change-feed type of this change (internal/eventtype);
	// empty derives it from Action, and actions that change no state have
	// none. Events are audit rows with a type: internal/events sequences
	// them for Watch streams and webhooks.
	EventType string
}

func toJSON(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}

// goneLiteral is virtualcluster.GonePhases as an SQL array literal (the
// phases are the package's constants, never input), so that the set form
// of the insert needs no argument that is the same for every row.
var goneLiteral = store.TextArrayLiteral(virtualcluster.GonePhases)

// recordEvent inserts one event ($1 actor, $2 its groups as a JSON array,
// $3 action, $4 resource, $5 request id, $6 correlation id, $7 department,
// $8 team, $9 before, $10 after, $11 event type), or, as Many, one per
// element of those arrays, ids drawn in the arrays' order (the planner
// evaluates nextval after ORDER BY's sort).
var recordEvent = &store.SetWrite{
	One: `
		WITH d AS (SELECT uid FROM departments WHERE id = $7),
		     t AS (SELECT uid FROM teams WHERE id = $8),
		     v AS (SELECT uid FROM virtual_clusters
		            WHERE team_id = $8 AND $4 LIKE 'teams/%/virtualClusters/%' AND id = split_part($4, '/', 4)
		            ORDER BY phase = ANY(` + goneLiteral + `), create_time DESC, uid LIMIT 1)
		INSERT INTO audit_events (id, time, actor, actor_groups, action, resource, request_id, correlation_id,
		                          department_id, team_id, before, after, department_uid, team_uid, resource_uid, event_type)
		VALUES (0 * length(pg_current_xact_id()::text) + nextval('audit_events_id_seq'), clock_timestamp(), $1,
		        ARRAY(SELECT jsonb_array_elements_text($2::jsonb)), $3, $4, $5, $6, $7, $8, $9, $10,
		        (SELECT uid FROM d), (SELECT uid FROM t),
		        CASE WHEN $4 = 'teams/' || $8 THEN (SELECT uid FROM t)
		             WHEN $8 = '' AND $4 = 'departments/' || $7 THEN (SELECT uid FROM d)
		             WHEN $4 = 'teams/' || $8 || '/virtualClusters/' || split_part($4, '/', 4) THEN (SELECT uid FROM v)
		        END, $11)`,
	Many: `
		INSERT INTO audit_events (id, time, actor, actor_groups, action, resource, request_id, correlation_id,
		                          department_id, team_id, before, after, department_uid, team_uid, resource_uid, event_type)
		SELECT 0 * length(pg_current_xact_id()::text) + nextval('audit_events_id_seq'), clock_timestamp(), e.actor,
		       ARRAY(SELECT jsonb_array_elements_text(e.groups)), e.action, e.resource, e.request_id, e.correlation_id,
		       e.department, e.team, e.before, e.after, d.uid, t.uid,
		       CASE WHEN e.resource = 'teams/' || e.team THEN t.uid
		            WHEN e.team = '' AND e.resource = 'departments/' || e.department THEN d.uid
		            WHEN e.resource = 'teams/' || e.team || '/virtualClusters/' || split_part(e.resource, '/', 4) THEN
		              (SELECT uid FROM virtual_clusters
		                WHERE team_id = e.team AND e.resource LIKE 'teams/%/virtualClusters/%' AND id = split_part(e.resource, '/', 4)
		                ORDER BY phase = ANY(` + goneLiteral + `), create_time DESC, uid LIMIT 1)
		       END, e.event_type
		  FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
		              $9::jsonb[], $10::jsonb[], $11::text[])
		       WITH ORDINALITY AS e(actor, groups, action, resource, request_id, correlation_id, department, team,
		                            before, after, event_type, n)
		  LEFT JOIN departments d ON d.id = e.department
		  LEFT JOIN teams t ON t.id = e.team
		 ORDER BY e.n`,
}

// groupsJSON is an actor's groups as a JSON array (arrays of arrays of
// different lengths cannot be an SQL argument; JSON can).
func groupsJSON(groups []string) []byte {
	b, _ := json.Marshal(groups) // a []string always marshals
	return b
}

// Record inserts e using tx; the correlation id is the API call's id from
// ctx ("" for the platform's own work).
func Record(ctx context.Context, tx *store.Tx, e Event) error {
	before, err := toJSON(e.Before)
	if err != nil {
		return err
	}
	after, err := toJSON(e.After)
	if err != nil {
		return err
	}
	groups := e.Actor.Groups
	if groups == nil {
		groups = []string{}
	}
	typ := e.EventType
	if typ == "" {
		typ = eventtype.ForAction(e.Action)
	}
	var eventType *string
	if typ != "" {
		eventType = &typ
	}
	// time is when the event is written, not now() (the transaction's start):
	// a transaction that waited for a lock behind another change must not
	// be recorded as happening before that change; events are listed by id,
	// i.e. in the order they were written.
	//
	// The id is drawn only after the transaction has its xid (the left
	// operand runs first): the event sequencer (internal/events) moves its
	// low-water mark past an id once every transaction with an xid below a
	// snapshot's xmax has ended, so an id drawn before its transaction's xid
	// could be passed over while still uncommitted, and its event never
	// positioned. Most callers have written already (and hold an xid); an
	// audit row that is a transaction's first write is the case this covers.
	//
	// The incarnations (uids) are those of the rows as this transaction
	// sees them: written after an insert, the new row's; after a delete,
	// none (only platform admins read a deleted team's last event by its
	// team; its department's admins still do by the department).
	// Sent with the transaction's next statement or its COMMIT: nothing
	// reads the row back, and a failure still fails the change it records.
	// A batch of approvals writes its events in one statement
	// (recordEvent.Many).
	tx.ExecDeferredSet(recordEvent, e.Actor.Subject, groupsJSON(groups), e.Action, e.Resource, e.RequestID,
		reqctx.CorrelationID(ctx), e.Department, e.Team, before, after, eventType)
	if eventType != nil {
		// The sequencer positions the event as soon as this commits.
		tx.SignalCommit()
	}
	return nil
}

// Stored is an event as read back.
type Stored struct {
	ID            int64
	Time          time.Time
	Actor         string
	ActorGroups   []string
	Action        string
	Resource      string
	RequestID     string
	CorrelationID string
	Department    string // id
	Team          string // id
	// ResourceUID is the incarnation of the resource changed, when it is
	// a department, team or virtual cluster ("" otherwise, or unknown).
	ResourceUID   string
	Before, After map[string]any
}

var eventFilter = filter.Schema{
	"resource":     {Column: "resource", Type: filter.String, Prefix: true},
	"actor":        {Column: "actor", Type: filter.String},
	"action":       {Column: "action", Type: filter.String},
	"team":         {Column: "team_id", Type: filter.String, Strip: "teams/"},
	"department":   {Column: "department_id", Type: filter.String, Strip: "departments/"},
	"time":         {Column: "time", Type: filter.Timestamp},
	"request_id":   {Column: "request_id", Type: filter.String},
	"resource_uid": {Column: "resource_uid", Type: filter.UUID},
}

// FirstPage is the Before of the first page of List.
const FirstPage = int64(math.MaxInt64)

// List returns events with id below before, newest first, in scope (rows
// of its teams and departments; all with Scope.All), and whether more
// follow.
//
// Webhook subscriptions name other systems' endpoints, so their events are
// read through a team only by those who manage its subscriptions
// (managedTeams), as the subscriptions themselves are; department admins
// read them through the department.
func List(ctx context.Context, q store.Querier, pageSize int32, filterExpr string, before int64, scope store.Scope, managedTeams []string) ([]Stored, bool, error) {
	lq, err := store.NewList(pageSize, filterExpr, eventFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("id < " + lq.Arg(before))
	if !scope.All {
		// By incarnation, not by id: a team (or department) that takes a
		// deleted one's id does not read the deleted one's events.
		lq.Where("(team_uid IN (SELECT uid FROM teams WHERE id = ANY(" + lq.Arg(scope.Teams) + "))" +
			" AND (resource NOT LIKE 'webhookSubscriptions/%' OR team_id = ANY(" + lq.Arg(managedTeams) + ")))" +
			" OR department_uid IN (SELECT uid FROM departments WHERE id = ANY(" + lq.Arg(scope.Departments) + "))")
	}
	return store.FetchPage(ctx, q, lq, `SELECT id, time, actor, actor_groups, action, resource, request_id,
		correlation_id, department_id, team_id, COALESCE(resource_uid::text, ''), before, after FROM audit_events`, "id DESC", scan)
}

func scan(row pgx.Row) (Stored, error) {
	var e Stored
	err := row.Scan(&e.ID, &e.Time, &e.Actor, &e.ActorGroups, &e.Action, &e.Resource, &e.RequestID,
		&e.CorrelationID, &e.Department, &e.Team, &e.ResourceUID, &e.Before, &e.After)
	return e, err
}
