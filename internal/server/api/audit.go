package api

import (
	"context"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/jsonshape"
)

// ListAuditEvents returns events newest first. Platform admins see all;
// department admins their departments'; team members their teams'.
func (s *Audit) ListAuditEvents(ctx context.Context, req *pb.ListAuditEventsRequest) (*pb.ListAuditEventsResponse, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	list, next, err := page(req.GetPageToken(), "audit|"+req.GetFilter(), audit.FirstPage, nil,
		func(before int64) ([]audit.Stored, bool, error) {
			return audit.List(ctx, s.db, req.GetPageSize(), req.GetFilter(), before, readScope(a), manageableScope(a).Teams)
		},
		func(e audit.Stored) int64 { return e.ID }, eventToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListAuditEventsResponse{AuditEvents: list, NextPageToken: next}, nil
}

func eventToProto(x audit.Stored) *pb.AuditEvent {
	e := &pb.AuditEvent{
		Name: "auditEvents/" + strconv.FormatInt(x.ID, 10), Time: ts(x.Time), Actor: x.Actor, ActorGroups: x.ActorGroups,
		Action: x.Action, Resource: x.Resource, RequestId: x.RequestID, CorrelationId: x.CorrelationID,
		ResourceUid: x.ResourceUID,
	}
	// Snapshots are stored with proto field names; callers get the JSON
	// names every other response uses.
	if x.Before != nil {
		e.Before, _ = structpb.NewStruct(jsonshape.CamelMap(x.Before))
	}
	if x.After != nil {
		e.After, _ = structpb.NewStruct(jsonshape.CamelMap(x.After))
	}
	if x.Department != "" {
		e.Department = "departments/" + x.Department
	}
	if x.Team != "" {
		e.Team = "teams/" + x.Team
	}
	return e
}
