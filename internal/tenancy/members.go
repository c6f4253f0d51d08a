package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Members implements pb.MemberServiceServer.
type Members struct {
	pb.UnimplementedMemberServiceServer
	*Service
}

const memberColumns = `team_id, id, principal_kind, principal, role, version, create_time, update_time`

// MemberRow is a stored member.
type MemberRow struct {
	Team, ID, Kind, Principal, Role string
	Version                         int64
	Created, Updated                time.Time
}

func scanMember(row pgx.Row) (MemberRow, error) {
	var m MemberRow
	err := row.Scan(&m.Team, &m.ID, &m.Kind, &m.Principal, &m.Role, &m.Version, &m.Created, &m.Updated)
	return m, err
}

func (m MemberRow) Proto() *pb.Member {
	out := &pb.Member{
		Name:       names.Member(m.Team, m.ID),
		Role:       pb.TeamRole(pb.TeamRole_value[m.Role]),
		Etag:       Etag(m.Version, m.Updated),
		CreateTime: ts(m.Created),
		UpdateTime: ts(m.Updated),
	}
	if m.Kind == "group" {
		out.Principal = &pb.Member_Group{Group: m.Principal}
	} else {
		out.Principal = &pb.Member_User{User: m.Principal}
	}
	return out
}

// ListTeamMembers returns every member of a team (for rendering RBAC).
func ListTeamMembers(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, team string) ([]MemberRow, error) {
	rows, err := q.Query(ctx, `SELECT `+memberColumns+` FROM members WHERE team_id = $1 ORDER BY id`, team)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MemberRow, error) { return scanMember(r) })
}

func validRole(r pb.TeamRole) bool {
	return r == pb.TeamRole_OWNER || r == pb.TeamRole_MEMBER || r == pb.TeamRole_VIEWER
}

// derivedMemberID makes a readable DNS label from a principal, with a short
// hash so "bob@x.io" and "bob@y.io" never collide.
func derivedMemberID(kind, principal string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(principal) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	base := strings.Trim(b.String(), "-")
	if base == "" {
		base = kind
	}
	sum := sha256.Sum256([]byte(kind + ":" + principal))
	return base + "-" + hex.EncodeToString(sum[:3])
}

// readableMember returns the member, its team and the caller's access, or
// NOT_FOUND when the caller cannot read the team.
func (s *Members) readableMember(ctx context.Context, name string) (TeamRow, MemberRow, *identity.Access, error) {
	teamID, memberID, err := names.ParseMember("name", name)
	if err != nil {
		return TeamRow{}, MemberRow{}, nil, err
	}
	t, a, err := s.ReadableTeam(ctx, "name", names.Team(teamID))
	if err != nil {
		if errs.KindOf(err) == errs.KindNotFound {
			return t, MemberRow{}, nil, errs.NotFound(name)
		}
		return t, MemberRow{}, nil, err
	}
	m, err := scanMember(s.Pool.QueryRow(ctx, `SELECT `+memberColumns+` FROM members WHERE team_id = $1 AND id = $2`, teamID, memberID))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, m, nil, errs.NotFound(name)
	}
	return t, m, a, err
}

func (s *Members) GetMember(ctx context.Context, req *pb.GetMemberRequest) (*pb.Member, error) {
	_, m, _, err := s.readableMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return m.Proto(), nil
}

var memberFilter = filter.Schema{
	"role":  {Column: "role", Type: filter.Enum, Enum: []string{"OWNER", "MEMBER", "VIEWER"}},
	"user":  {Column: "CASE WHEN principal_kind = 'user' THEN principal END", Type: filter.String},
	"group": {Column: "CASE WHEN principal_kind = 'group' THEN principal END", Type: filter.String},
}

func (s *Members) ListMembers(ctx context.Context, req *pb.ListMembersRequest) (*pb.ListMembersResponse, error) {
	t, _, err := s.ReadableTeam(ctx, "parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	q, err := store.NewList(req.GetPageSize(), req.GetFilter(), memberFilter)
	if err != nil {
		return nil, err
	}
	scope := "members|" + req.GetParent() + "|" + req.GetFilter()
	after, err := decodeIDCursor(req.GetPageToken(), scope)
	if err != nil {
		return nil, err
	}
	q.Where("team_id = " + q.Arg(t.ID))
	q.Where("id > " + q.Arg(after))
	list, more, err := store.FetchPage(ctx, s.Pool, q, `SELECT `+memberColumns+` FROM members`, "id", scanMember)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListMembersResponse{}
	if more {
		resp.NextPageToken = store.EncodePageToken(scope, list[len(list)-1].ID)
	}
	for _, m := range list {
		resp.Members = append(resp.Members, m.Proto())
	}
	return resp, nil
}

func (s *Members) CreateMember(ctx context.Context, req *pb.CreateMemberRequest) (*pb.Member, error) {
	t, a, err := s.ReadableTeam(ctx, "parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if !a.CanManageMembers(t.ID, t.Department) {
		return nil, errs.PermissionDenied("only owners of %s and department admins manage its members", req.GetParent())
	}
	var v errs.Violations
	m := req.GetMember()
	if m == nil {
		v.Add("member", "required")
		return nil, v.Err()
	}
	kind, principal := "", ""
	switch p := m.GetPrincipal().(type) {
	case *pb.Member_User:
		kind, principal = "user", strings.TrimSpace(p.User)
	case *pb.Member_Group:
		kind, principal = "group", strings.TrimSpace(p.Group)
	default:
		v.Add("member.user", "set exactly one of member.user or member.group")
	}
	if kind != "" && (principal == "" || len(principal) > 256 || strings.ContainsRune(principal, 0)) {
		v.Add("member."+kind, "must be 1 to 256 characters, without NUL")
	}
	if !validRole(m.GetRole()) {
		v.Add("member.role", "must be OWNER, MEMBER or VIEWER")
	}
	// member_id is optional: when empty it is derived from the principal
	// (and a missing principal has its own violation already).
	id := req.GetMemberId()
	switch {
	case id != "":
		names.ValidateID(&v, "member_id", id)
	case kind != "":
		id = derivedMemberID(kind, principal)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	var out *pb.Member
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		out, err = Idempotent(ctx, tx, a.Principal.Subject, "CreateMember", req.GetRequestId(), req,
			func() *pb.Member { return &pb.Member{} },
			func() (*pb.Member, error) {
				row, err := scanMember(tx.QueryRow(ctx, `
					INSERT INTO members (team_id, id, principal_kind, principal, role)
					VALUES ($1, $2, $3, $4, $5) RETURNING `+memberColumns,
					t.ID, id, kind, principal, m.GetRole().String()))
				if err != nil {
					if c := store.Classify(err); errs.KindOf(c) == errs.KindAlreadyExists {
						if store.ConstraintName(err) == "members_principal_unique" {
							return nil, errs.New(errs.KindAlreadyExists, errs.ReasonAlreadyExists,
								"%s %q is already a member of %s", kind, principal, req.GetParent())
						}
						return nil, errs.AlreadyExists(names.Member(t.ID, id))
					}
					return nil, err
				}
				res := row.Proto()
				if err := workqueue.EnqueueTeam(ctx, tx, t.ID); err != nil {
					return nil, err
				}
				return res, audit.Record(ctx, tx, audit.Event{
					Actor: a.Principal, Action: "CreateMember", Resource: res.Name, RequestID: req.GetRequestId(),
					CorrelationID: s.correlationID(ctx), Department: t.Department, Team: t.ID, After: res,
				})
			})
		return err
	})
	return out, err
}

func (s *Members) UpdateMember(ctx context.Context, req *pb.UpdateMemberRequest) (*pb.Member, error) {
	m := req.GetMember()
	if m == nil {
		return nil, errs.InvalidField("member", "required")
	}
	t, cur, a, err := s.readableMember(ctx, m.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageMembers(t.ID, t.Department) {
		return nil, errs.PermissionDenied("only owners of %s and department admins manage its members", names.Team(t.ID))
	}
	if _, err := maskPaths(req.GetUpdateMask().GetPaths(), "role"); err != nil {
		return nil, err
	}
	if !validRole(m.GetRole()) {
		return nil, errs.InvalidField("member.role", "must be OWNER, MEMBER or VIEWER")
	}
	var out *pb.Member
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := scanMember(tx.QueryRow(ctx, `SELECT `+memberColumns+` FROM members WHERE team_id = $1 AND id = $2 FOR UPDATE`, cur.Team, cur.ID))
		if errors.Is(err, pgx.ErrNoRows) {
			return errs.NotFound(m.GetName())
		}
		if err != nil {
			return err
		}
		before := cur.Proto()
		if err := CheckEtag(m.GetName(), m.GetEtag(), before.Etag); err != nil {
			return err
		}
		mask := req.GetUpdateMask().GetPaths()
		if ((m.GetUser() != "" || slices.Contains(mask, "user")) && m.GetUser() != before.GetUser()) ||
			((m.GetGroup() != "" || slices.Contains(mask, "group")) && m.GetGroup() != before.GetGroup()) {
			return errs.InvalidField("member.user", "a member's user or group cannot change; delete the member and create a new one")
		}
		row, err := scanMember(tx.QueryRow(ctx, `UPDATE members SET role = $3, version = version + 1, update_time = now()
			WHERE team_id = $1 AND id = $2 RETURNING `+memberColumns, cur.Team, cur.ID, m.GetRole().String()))
		if err != nil {
			return err
		}
		out = row.Proto()
		if err := workqueue.EnqueueTeam(ctx, tx, t.ID); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{
			Actor: a.Principal, Action: "UpdateMember", Resource: out.Name, CorrelationID: s.correlationID(ctx),
			Department: t.Department, Team: t.ID, Before: before, After: out,
		})
	})
	return out, err
}

func (s *Members) DeleteMember(ctx context.Context, req *pb.DeleteMemberRequest) (*emptypb.Empty, error) {
	t, cur, a, err := s.readableMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageMembers(t.ID, t.Department) {
		return nil, errs.PermissionDenied("only owners of %s and department admins manage its members", names.Team(t.ID))
	}
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := scanMember(tx.QueryRow(ctx, `SELECT `+memberColumns+` FROM members WHERE team_id = $1 AND id = $2 FOR UPDATE`, cur.Team, cur.ID))
		if errors.Is(err, pgx.ErrNoRows) {
			return errs.NotFound(req.GetName())
		}
		if err != nil {
			return err
		}
		before := cur.Proto()
		if err := CheckEtag(req.GetName(), req.GetEtag(), before.Etag); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM members WHERE team_id = $1 AND id = $2`, cur.Team, cur.ID); err != nil {
			return err
		}
		if err := workqueue.EnqueueTeam(ctx, tx, t.ID); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{
			Actor: a.Principal, Action: "DeleteMember", Resource: req.GetName(), CorrelationID: s.correlationID(ctx),
			Department: t.Department, Team: t.ID, Before: before,
		})
	})
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}
