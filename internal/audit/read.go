package audit

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
)

// Reader implements pb.AuditServiceServer.
type Reader struct {
	pb.UnimplementedAuditServiceServer
	Pool *pgxpool.Pool
	// Access loads what the caller may read.
	Access func(ctx context.Context) (*identity.Access, error)
}

var eventFilter = filter.Schema{
	"resource":   {Column: "resource", Type: filter.String, Prefix: true},
	"actor":      {Column: "actor", Type: filter.String},
	"action":     {Column: "action", Type: filter.String},
	"team":       {Column: "team_id", Type: filter.String, Strip: "teams/"},
	"department": {Column: "department_id", Type: filter.String, Strip: "departments/"},
	"time":       {Column: "time", Type: filter.Timestamp},
	"request_id": {Column: "request_id", Type: filter.String},
}

// ListAuditEvents returns events newest first. Platform admins see all;
// department admins their departments'; team members their teams'.
func (r *Reader) ListAuditEvents(ctx context.Context, req *pb.ListAuditEventsRequest) (*pb.ListAuditEventsResponse, error) {
	a, err := r.Access(ctx)
	if err != nil {
		return nil, err
	}
	q, err := store.NewList(req.GetPageSize(), req.GetFilter(), eventFilter)
	if err != nil {
		return nil, err
	}
	scope := "audit|" + req.GetFilter()
	before := int64(math.MaxInt64)
	if err := store.DecodePageToken(req.GetPageToken(), scope, &before); err != nil {
		return nil, err
	}
	q.Where("id < " + q.Arg(before))
	if !a.PlatformAdmin {
		q.Where("team_id = ANY(" + q.Arg(a.ReadableTeams()) + ") OR department_id = ANY(" + q.Arg(a.AdminDepartments()) + ")")
	}
	list, more, err := store.FetchPage(ctx, r.Pool, q, `SELECT id, time, actor, actor_groups, action, resource, request_id,
		correlation_id, department_id, team_id, before, after FROM audit_events`, "id DESC", scanEvent)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListAuditEventsResponse{}
	if more {
		resp.NextPageToken = store.EncodePageToken(scope, list[len(list)-1].id)
	}
	for _, x := range list {
		if x.before != nil {
			x.ev.Before, _ = structpb.NewStruct(x.before)
		}
		if x.after != nil {
			x.ev.After, _ = structpb.NewStruct(x.after)
		}
		if x.ev.Department != "" {
			x.ev.Department = "departments/" + x.ev.Department
		}
		if x.ev.Team != "" {
			x.ev.Team = "teams/" + x.ev.Team
		}
		resp.AuditEvents = append(resp.AuditEvents, x.ev)
	}
	return resp, nil
}

// eventRow is an audit event as read, before its JSON columns are
// converted to Structs.
type eventRow struct {
	id            int64
	ev            *pb.AuditEvent
	before, after map[string]any
}

func scanEvent(row pgx.Row) (eventRow, error) {
	var x eventRow
	var t time.Time
	e := &pb.AuditEvent{}
	err := row.Scan(&x.id, &t, &e.Actor, &e.ActorGroups, &e.Action, &e.Resource, &e.RequestId,
		&e.CorrelationId, &e.Department, &e.Team, &x.before, &x.after)
	e.Name = "auditEvents/" + strconv.FormatInt(x.id, 10)
	e.Time = timestamppb.New(t)
	x.ev = e
	return x, err
}
