package api

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/eventtype"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// DefaultHeartbeat is how often an idle watch sends HEARTBEAT.
const DefaultHeartbeat = 15 * time.Second

// maxInitialRequests bounds the EXISTING requests a watch starts with.
const maxInitialRequests = 1000

// decoded is what DecodeEvent makes of an event once, for every watcher.
type decoded struct {
	after, before proto.Message // the API message of a virtual cluster or request
	// Who a member event is about (user or group), and a department
	// event's admin groups: watchers whose access they may change reload it.
	principals []string
}

// DecodeEvent turns an event's JSON into the API's messages; the hub runs
// it once per event (events.HubConfig.Decode).
func DecodeEvent(e *events.Event) {
	var d decoded
	switch e.Kind() {
	case eventtype.KindVirtualCluster:
		d.after, d.before = decodeAs[*pb.VirtualCluster](e.After), decodeAs[*pb.VirtualCluster](e.Before)
	case eventtype.KindRequest:
		d.after, d.before = decodeAs[*pb.Request](e.After), decodeAs[*pb.Request](e.Before)
	case eventtype.KindMember, eventtype.KindDepartment:
		for _, raw := range []json.RawMessage{e.Before, e.After} {
			var v struct {
				User        string   `json:"user"`
				Group       string   `json:"group"`
				AdminGroups []string `json:"admin_groups"`
			}
			if len(raw) > 0 && json.Unmarshal(raw, &v) == nil {
				d.principals = append(d.principals, v.User, v.Group)
				d.principals = append(d.principals, v.AdminGroups...)
			}
		}
	}
	e.Decoded = &d
}

var lenient = protojson.UnmarshalOptions{DiscardUnknown: true}

func decodeAs[M interface {
	proto.Message
	*T
}, T any](raw json.RawMessage) proto.Message {
	if len(raw) == 0 {
		return nil
	}
	m := M(new(T))
	if err := lenient.Unmarshal(raw, m); err != nil {
		return nil
	}
	return m
}

// watchSpec is what differs between the watches of virtual clusters and
// of requests.
type watchSpec[M proto.Message] struct {
	kind string // eventtype kind of the objects watched
	// match says whether an object passes the caller's filter; an event
	// passes when its object did before or does after the change.
	match func(e *events.Event, obj M) bool
	// existing lists the objects the watch starts with (in q, a snapshot).
	existing func(ctx context.Context, q store.Querier, a *identity.Access, send func(M) error) error
	// message wraps an object (nil for SYNCED and HEARTBEAT).
	message func(kind pb.WatchEventKind, position int64, e *events.Event, obj M) proto.Message
}

// watch runs one watch for the caller until ctx ends, the server stops or
// the token expires. The caller's access is loaded at the start and again
// whenever an event may have changed it (a membership or a department's
// admin groups of the caller, its team deleted), and every event is
// checked against it as a read of the object would be.
func watch[M proto.Message](ctx context.Context, s *API, resume int64, spec watchSpec[M], send func(proto.Message) error) error {
	if s.hub == nil {
		return errs.New(errs.KindUnavailable, errs.ReasonShuttingDown, "watches are not served here")
	}
	a, err := s.access(ctx)
	if err != nil {
		return err
	}
	release, err := s.hub.Acquire(a.Principal.Subject)
	if err != nil {
		return err
	}
	defer release()

	var cursor int64
	var seen map[int64]bool // committed before the snapshot, positioned after it
	if resume > 0 {
		if _, err := events.CheckResume(ctx, s.db, resume); err != nil {
			return err
		}
		cursor = resume
	} else {
		cursor, seen, err = events.Snapshot(ctx, s.db, func(ctx context.Context, q store.Querier) error {
			return spec.existing(ctx, q, a, func(obj M) error {
				return send(spec.message(pb.WatchEventKind_EXISTING, 0, nil, obj))
			})
		})
		if err != nil {
			return err
		}
		if err := send(spec.message(pb.WatchEventKind_SYNCED, cursor, nil, zero[M]())); err != nil {
			return err
		}
	}

	heartbeat := time.NewTimer(s.heartbeat)
	defer heartbeat.Stop()
	var expired <-chan time.Time
	if exp := a.Principal.Expiry; !exp.IsZero() {
		t := time.NewTimer(time.Until(exp))
		defer t.Stop()
		expired = t.C
	}
	for {
		changed := s.hub.Changed()
		evs, err := s.hub.Since(ctx, cursor, 256)
		if err != nil {
			return err
		}
		for _, e := range evs {
			cursor = e.Position
			if seen[e.ID] {
				continue
			}
			d, _ := e.Decoded.(*decoded)
			if d == nil {
				continue
			}
			if mayChangeAccess(a, e, d) {
				if a, err = s.access(ctx); err != nil {
					return err
				}
			}
			if e.Kind() != spec.kind || !a.CanReadTeam(e.Team, e.Department) {
				continue
			}
			after, _ := d.after.(M)
			before, _ := d.before.(M)
			obj := after
			if d.after == nil {
				obj = before
			}
			if d.after == nil && d.before == nil {
				continue
			}
			if !(d.after != nil && spec.match(e, after)) && !(d.before != nil && spec.match(e, before)) {
				continue
			}
			if err := send(spec.message(pb.WatchEventKind_CHANGED, e.Position, e, obj)); err != nil {
				return err
			}
			heartbeat.Reset(s.heartbeat)
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-heartbeat.C:
			if err := send(spec.message(pb.WatchEventKind_HEARTBEAT, cursor, nil, zero[M]())); err != nil {
				return err
			}
			heartbeat.Reset(s.heartbeat)
		case <-ctx.Done():
			return ctx.Err()
		case <-s.hub.Closing():
			return events.ShuttingDown(cursor)
		case <-expired:
			return errs.New(errs.KindUnauthenticated, errs.ReasonTokenExpired,
				"the token expired; watch again with a fresh token and resume_position %d", cursor).
				With("position", itoa(cursor))
		}
	}
}

func zero[M any]() M {
	var m M
	return m
}

// mayChangeAccess: events after which the caller's access may differ.
func mayChangeAccess(a *identity.Access, e *events.Event, d *decoded) bool {
	switch e.Kind() {
	case eventtype.KindMember, eventtype.KindDepartment:
		for _, p := range d.principals {
			if p != "" && (p == a.Principal.Username || slices.Contains(a.Principal.Groups, p)) {
				return true
			}
		}
	case eventtype.KindTeam:
		_, has := a.Teams[e.Team]
		return e.Type == eventtype.TeamDeleted && has
	}
	return false
}

// WatchVirtualClusters implements pb.WatchServiceServer.
func (s *Watches) WatchVirtualClusters(req *pb.WatchVirtualClustersRequest, stream pb.WatchService_WatchVirtualClustersServer) error {
	ctx := stream.Context()
	team, dept, err := watchScope(ctx, s.API, "parent", req.GetParent(), req.GetDepartment())
	if err != nil {
		return err
	}
	for i, p := range req.GetPhases() {
		if p == pb.VirtualClusterStatus_PHASE_UNSPECIFIED || pb.VirtualClusterStatus_Phase_name[int32(p)] == "" {
			return errs.InvalidField("phases["+itoa(int64(i))+"]", "must be a phase")
		}
	}
	spec := watchSpec[*pb.VirtualCluster]{
		kind: eventtype.KindVirtualCluster,
		match: func(e *events.Event, v *pb.VirtualCluster) bool {
			return (team == "" || e.Team == team) && (dept == "" || e.Department == dept) &&
				(len(req.GetPhases()) == 0 || slices.Contains(req.GetPhases(), v.GetStatus().GetPhase()))
		},
		existing: func(ctx context.Context, q store.Querier, a *identity.Access, send func(*pb.VirtualCluster) error) error {
			o := virtualcluster.ListOptions{PageSize: store.MaxPageSize, Team: team, Scope: readScope(a)}
			if dept != "" && team == "" {
				o.Scope = departmentScope(a, dept)
			}
			for {
				list, more, err := virtualcluster.List(ctx, q, o)
				if err != nil {
					return err
				}
				for _, v := range list {
					pv := virtualClusterToProto(v)
					if len(req.GetPhases()) == 0 || slices.Contains(req.GetPhases(), pv.GetStatus().GetPhase()) {
						if err := send(pv); err != nil {
							return err
						}
					}
				}
				if !more {
					return nil
				}
				o.After = list[len(list)-1].ID
			}
		},
		message: func(kind pb.WatchEventKind, position int64, e *events.Event, v *pb.VirtualCluster) proto.Message {
			m := &pb.VirtualClusterEvent{Kind: kind, Position: position, VirtualCluster: v}
			if e != nil {
				m.Type, m.Id, m.Time, m.Actor = e.Type, itoa(e.ID), ts(e.Time), e.Actor
			}
			return m
		},
	}
	return watch(ctx, s.API, req.GetResumePosition(), spec, func(m proto.Message) error {
		return stream.Send(m.(*pb.VirtualClusterEvent))
	})
}

// WatchRequests implements pb.WatchServiceServer.
func (s *Watches) WatchRequests(req *pb.WatchRequestsRequest, stream pb.WatchService_WatchRequestsServer) error {
	ctx := stream.Context()
	team, dept, err := watchScope(ctx, s.API, "team", req.GetTeam(), req.GetDepartment())
	if err != nil {
		return err
	}
	states := make([]string, 0, len(req.GetStates()))
	for i, st := range req.GetStates() {
		if st == pb.Request_STATE_UNSPECIFIED || pb.Request_State_name[int32(st)] == "" {
			return errs.InvalidField("states["+itoa(int64(i))+"]", "must be a request state")
		}
		states = append(states, st.String())
	}
	spec := watchSpec[*pb.Request]{
		kind: eventtype.KindRequest,
		match: func(e *events.Event, r *pb.Request) bool {
			return (team == "" || e.Team == team) && (dept == "" || e.Department == dept) &&
				(len(states) == 0 || slices.Contains(states, r.GetState().String()))
		},
		existing: func(ctx context.Context, q store.Querier, a *identity.Access, send func(*pb.Request) error) error {
			filter := ""
			and := func(clause string) {
				if filter != "" {
					filter += " AND "
				}
				filter += clause
			}
			if team != "" {
				and(`team = "teams/` + team + `"`)
			}
			if dept != "" {
				and(`department = "departments/` + dept + `"`)
			}
			if len(states) == 1 {
				and("state = " + states[0])
			}
			sent, before := 0, request.FirstPage
			for {
				list, more, err := request.List(ctx, q, store.MaxPageSize, filter, before, readScope(a))
				if err != nil {
					return err
				}
				for _, r := range list {
					if len(states) > 1 && !slices.Contains(states, string(r.State)) {
						continue
					}
					if err := send(requestToProto(r)); err != nil {
						return err
					}
					if sent++; sent == maxInitialRequests {
						return nil
					}
				}
				if !more {
					return nil
				}
				before = list[len(list)-1].Seq
			}
		},
		message: func(kind pb.WatchEventKind, position int64, e *events.Event, r *pb.Request) proto.Message {
			m := &pb.RequestEvent{Kind: kind, Position: position, Request: r}
			if e != nil {
				m.Type, m.Id, m.Time, m.Actor = e.Type, itoa(e.ID), ts(e.Time), e.Actor
			}
			return m
		},
	}
	return watch(ctx, s.API, req.GetResumePosition(), spec, func(m proto.Message) error {
		return stream.Send(m.(*pb.RequestEvent))
	})
}

// watchScope parses a watch's team (field: "teams/{team}", "teams/-" or
// empty) and department filters into ids. A team the caller cannot read is
// NOT_FOUND, as for reads; a department too.
func watchScope(ctx context.Context, s *API, field, teamName, deptName string) (team, dept string, err error) {
	if deptName != "" {
		if dept, err = names.ParseDepartment("department", deptName); err != nil {
			return "", "", err
		}
		a, err := s.access(ctx)
		if err != nil {
			return "", "", err
		}
		if !a.CanReadDepartment(dept) {
			return "", "", errs.NotFound(deptName)
		}
	}
	switch teamName {
	case "":
		if field == "parent" {
			return "", "", errs.InvalidField(field, "required: teams/{team} or teams/-")
		}
	case "teams/-":
	default:
		t, _, err := s.readableTeam(ctx, field, teamName)
		if err != nil {
			return "", "", err
		}
		team = t.ID
	}
	return team, dept, nil
}

// departmentScope narrows a caller's read scope to one department.
func departmentScope(a *identity.Access, dept string) store.Scope {
	if a.IsDepartmentAdmin(dept) {
		return store.Scope{Departments: []string{dept}}
	}
	var teams []string
	for _, t := range a.ReadableTeams() {
		if a.Teams[t].Department == dept {
			teams = append(teams, t)
		}
	}
	return store.Scope{Teams: teams}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
