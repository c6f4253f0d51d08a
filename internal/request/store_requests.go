package request

// The requests table: every statement on it is in this file.

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

const columns = `id, seq, team_id, department_id, kind, virtual_cluster_id, payload, justification, state,
	requester, decider, decide_time, decision_reason, approval_policy_id, target_generation, failure_message,
	version, create_time, update_time`

func scan(row pgx.Row) (Request, error) {
	var r Request
	var payload []byte
	err := row.Scan(&r.ID, &r.Seq, &r.Team, &r.Department, &r.Kind, &r.VirtualCluster, &payload, &r.Justification,
		&r.State, &r.Requester, &r.Decider, &r.DecideTime, &r.DecisionReason, &r.ApprovalPolicy, &r.TargetGeneration,
		&r.FailureMessage, &r.Version, &r.Created, &r.Updated)
	if err != nil {
		return r, err
	}
	r.Payload, err = DecodePayload(payload)
	return r, err
}

// Get reads a request; lock takes a row lock (in a Tx).
func Get(ctx context.Context, q store.Querier, id string, lock bool) (Request, error) {
	return store.GetOne(ctx, q, `SELECT `+columns+` FROM requests WHERE id = $1`, lock, scan, errs.NotFound(names.Request(id)), id)
}

// QueueGet is Get, queued in b (for Tx.Send or DB.Send).
func QueueGet(b *store.Batch, dst *Request, id string, lock bool) {
	store.QueueOne(b, dst, `SELECT `+columns+` FROM requests WHERE id = $1`, lock, scan, errs.NotFound(names.Request(id)), id)
}

// QueueGetLocked is QueueGet (locked) for many requests in one statement:
// each is locked in the order of ids, and each one found is handed to
// found (ids not found are left out).
func QueueGetLocked(b *store.Batch, ids []string, found func(Request)) {
	store.QueueEach(b, scan, found, `SELECT r.* FROM unnest($1::text[]) WITH ORDINALITY AS u(id, n)
		CROSS JOIN LATERAL (SELECT `+columns+` FROM requests WHERE id = u.id FOR UPDATE) r
		ORDER BY u.n`, ids)
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "r" + hex.EncodeToString(b[:])
}

// insert stores a new PENDING request. A second pending request for the
// same virtual cluster (or team quota) violates a unique index.
func insert(ctx context.Context, tx *store.Tx, team, dept, justification, requester string, p Payload) (Request, error) {
	raw, err := EncodePayload(p)
	if err != nil {
		return Request{}, err
	}
	var vcID *string
	switch {
	case p.Create != nil:
		vcID = &p.Create.VirtualClusterID
	case p.target() != "":
		if _, id, err := names.ParseVirtualCluster("", p.target()); err == nil {
			vcID = &id
		}
	}
	// Deferred (store.Tx.ExecDeferred): the row is computed here, its
	// payload decoded back from what is stored, and only seq (which orders
	// lists, nothing a caller sees) is left to the database.
	stored, err := DecodePayload(raw)
	if err != nil {
		return Request{}, err
	}
	now := store.Now()
	row := Request{ID: newID(), Team: team, Department: dept, Kind: p.Kind(), VirtualCluster: vcID, Payload: stored,
		Justification: justification, State: StatePending, Requester: requester, Version: 1, Created: now, Updated: now}
	tx.ExecDeferredSetMapped(insertRequestRow, func(err error) error {
		if store.SQLState(err) == "23505" {
			what := names.Team(team) + "'s quota"
			if vcID != nil {
				what = names.VirtualCluster(team, *vcID)
			}
			return errs.New(errs.KindAlreadyExists, errs.ReasonAlreadyExists,
				"%s already has a pending request; cancel it or wait for a decision", what)
		}
		return err
	}, row.ID, team, dept, row.Kind, vcID, raw, justification, StatePending, requester, now)
	return row, nil
}

// insertRequestRow inserts a pending request; a batch of request creates
// inserts theirs in one statement (store.SetWrite).
var insertRequestRow = &store.SetWrite{
	One: `
		INSERT INTO requests (id, team_id, department_id, kind, virtual_cluster_id, payload, justification, state, requester,
		                      create_time, update_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)`,
	Many: `
		INSERT INTO requests (id, team_id, department_id, kind, virtual_cluster_id, payload, justification, state, requester,
		                      create_time, update_time)
		SELECT u.id, u.team, u.dept, u.kind, u.vc, u.payload, u.justification, u.state, u.requester, u.created, u.created
		  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[],
		              $9::text[], $10::timestamptz[])
		       WITH ORDINALITY AS u(id, team, dept, kind, vc, payload, justification, state, requester, created, n)
		 ORDER BY u.n`,
}

// setDecision records an approval (approved, with the policy and the
// generation the host must reach) or a rejection/cancellation.
func setDecision(ctx context.Context, tx *store.Tx, id string, state State, decider, reason string, policyID *string, target *int64) (Request, error) {
	return scan(tx.QueryRow(ctx, `
		UPDATE requests SET state = $2, decider = $3, decide_time = now(), decision_reason = $4,
		       approval_policy_id = $5, target_generation = $6, version = version + 1, update_time = now()
		 WHERE id = $1 RETURNING `+columns, id, state, decider, reason, policyID, target))
}

// decisionRow is setDecisionDeferred's write; as Many, for several
// requests at once (a batch of approvals, store.SetWrite).
var decisionRow = &store.SetWrite{
	One: `
		UPDATE requests SET state = $2, decider = $3, decide_time = $4, decision_reason = $5,
		       approval_policy_id = $6, target_generation = $7, version = $8, update_time = $4
		 WHERE id = $1`,
	Many: `
		UPDATE requests r SET state = u.state, decider = u.decider, decide_time = u.decided, decision_reason = u.reason,
		       approval_policy_id = u.policy, target_generation = u.target, version = u.version, update_time = u.decided
		  FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])
		       AS u(id, state, decider, decided, reason, policy, target, version)
		 WHERE r.id = u.id`,
	Key: 1,
}

// setDecisionDeferred is setDecision for cur, which the transaction has
// locked or written: the row is computed here and the write deferred
// (store.Tx.ExecDeferred). It returns the row as stored.
func setDecisionDeferred(tx *store.Tx, cur Request, state State, decider, reason string, policyID *string, target *int64) Request {
	now := store.Now()
	next := cur
	next.State, next.Decider, next.DecideTime, next.DecisionReason = state, decider, &now, reason
	next.ApprovalPolicy, next.TargetGeneration, next.Version, next.Updated = policyID, target, cur.Version+1, now
	tx.ExecDeferredSet(decisionRow, cur.ID, state, decider, now, reason, policyID, target, next.Version)
	return next
}

// setState moves a request on without touching the decision (APPROVED ->
// APPLIED in the transaction that approved a team quota change).
func setState(ctx context.Context, tx *store.Tx, id string, state State) (Request, error) {
	return scan(tx.QueryRow(ctx, `UPDATE requests SET state = $2, version = version + 1
		WHERE id = $1 RETURNING `+columns, id, state))
}

// pendingFor locks the pending requests about a virtual cluster.
func pendingFor(ctx context.Context, tx *store.Tx, vcID string) ([]Request, error) {
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM requests
		WHERE virtual_cluster_id = $1 AND state = $2 FOR UPDATE`, vcID, StatePending)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Request, error) { return scan(r) })
}

// settle moves the APPROVED requests on a virtual cluster whose target
// generation is at most gen to state, and returns them.
func settle(ctx context.Context, tx *store.Tx, vcID string, gen int64, state State, failure string) ([]Request, error) {
	rows, err := tx.Query(ctx, `UPDATE requests SET state = $3, failure_message = $4, version = version + 1, update_time = now()
		WHERE virtual_cluster_id = $1 AND state = $5 AND target_generation <= $2 RETURNING `+columns,
		vcID, gen, state, failure, StateApproved)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Request, error) { return scan(r) })
}

// TeamHistory deletes a deleted team's requests and (gone) virtual
// clusters; it implements tenancy.TeamHistory.
type TeamHistory struct{}

// DeleteTeamHistory implements tenancy.TeamHistory.
func (TeamHistory) DeleteTeamHistory(ctx context.Context, tx *store.Tx, team string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM requests WHERE team_id = $1`, team); err != nil {
		return err
	}
	return virtualcluster.DeleteOfTeam(ctx, tx, team)
}

var listFilter = filter.Schema{
	"state":      {Column: "state", Type: filter.Enum, Enum: stringsOf(States)},
	"kind":       {Column: "kind", Type: filter.Enum, Enum: stringsOf(Kinds)},
	"team":       {Column: "team_id", Type: filter.String, Strip: "teams/"},
	"department": {Column: "department_id", Type: filter.String, Strip: "departments/"},
	"requester":  {Column: "requester", Type: filter.String},
}

func stringsOf[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// FirstPage is the Before of the first page of List.
const FirstPage = int64(1<<63 - 1)

// List returns requests with seq below before, newest first, in scope, and
// whether more follow.
func List(ctx context.Context, q store.Querier, pageSize int32, filterExpr string, before int64, scope store.Scope) ([]Request, bool, error) {
	lq, err := store.NewList(pageSize, filterExpr, listFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("seq < " + lq.Arg(before))
	if !scope.All {
		lq.Where("team_id = ANY(" + lq.Arg(scope.Teams) + ") OR department_id = ANY(" + lq.Arg(scope.Departments) + ")")
	}
	return store.FetchPage(ctx, q, lq, `SELECT `+columns+` FROM requests`, "seq DESC", scan)
}

// CountByState counts requests per state (metrics).
func CountByState(ctx context.Context, q store.Querier) (map[string]int64, error) {
	return store.CountBy(ctx, q, `SELECT state, count(*) FROM requests GROUP BY state`)
}
