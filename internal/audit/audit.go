// Package audit writes audit events inside the caller's transaction, so a
// change and its record commit or roll back together, and reads them back.
package audit

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gpuplane/gpuplane/internal/identity"
)

// Event is one change.
type Event struct {
	Actor         identity.Principal
	Action        string // e.g. "CreateTeam"
	Resource      string // e.g. "teams/team-a"
	RequestID     string // the caller's idempotency key
	CorrelationID string // the API call's x-request-id
	Department    string // scope for reads (department id)
	Team          string // scope for reads (team id)
	Before, After proto.Message
}

// SystemActor is the principal for changes the platform makes itself.
func SystemActor(component string) identity.Principal {
	return identity.Principal{Subject: "system:" + component, Username: "system:" + component}
}

var marshal = protojson.MarshalOptions{UseProtoNames: true}

func toJSON(m proto.Message) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	b, err := marshal.Marshal(m)
	if err != nil {
		return nil, err
	}
	// protojson output is not byte-stable on purpose; jsonb normalises it.
	if !json.Valid(b) {
		return nil, fmt.Errorf("audit: invalid JSON for %T", m)
	}
	return b, nil
}

// Record inserts e using tx.
func Record(ctx context.Context, tx pgx.Tx, e Event) error {
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
	// time is when the event is written, not now() (the transaction's start):
	// a transaction that waited for a lock behind another change must not
	// be recorded as happening before that change; events are listed by id,
	// i.e. in the order they were written.
	_, err = tx.Exec(ctx, `
		INSERT INTO audit_events (time, actor, actor_groups, action, resource, request_id, correlation_id,
		                          department_id, team_id, before, after)
		VALUES (clock_timestamp(), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		e.Actor.Subject, groups, e.Action, e.Resource, e.RequestID, e.CorrelationID,
		e.Department, e.Team, before, after)
	return err
}
