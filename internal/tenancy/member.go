package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// PrincipalKind says whether a member is a user or a group.
type PrincipalKind string

// Principal kinds, as stored.
const (
	KindUser  PrincipalKind = "user"
	KindGroup PrincipalKind = "group"
)

// Role is a member's role on its team (the API's TeamRole names).
type Role string

// Roles.
const (
	RoleOwner  Role = "OWNER"
	RoleMember Role = "MEMBER"
	RoleViewer Role = "VIEWER"
)

// Roles are the valid roles, in API order.
var Roles = []Role{RoleOwner, RoleMember, RoleViewer}

// Member is a stored member: a user or group with a role on a team.
type Member struct {
	Team, ID         string
	Kind             PrincipalKind
	Principal        string
	Role             Role
	Version          int64
	Created, Updated time.Time
}

// Name is the API resource name.
func (m Member) Name() string { return names.Member(m.Team, m.ID) }

// Etag of the current version.
func (m Member) Etag() string { return store.Etag(m.Version, m.Updated) }

type memberJSON struct {
	Name       string          `json:"name,omitempty"`
	User       string          `json:"user,omitempty"`
	Group      string          `json:"group,omitempty"`
	Role       Role            `json:"role,omitempty"`
	Etag       string          `json:"etag,omitempty"`
	CreateTime *jsonshape.Time `json:"create_time,omitempty"`
	UpdateTime *jsonshape.Time `json:"update_time,omitempty"`
}

// Snapshot renders m as the API does (the Member message), for audit.
func (m Member) Snapshot() any {
	j := memberJSON{Name: m.Name(), Role: m.Role, Etag: m.Etag(),
		CreateTime: &jsonshape.Time{Time: m.Created}, UpdateTime: &jsonshape.Time{Time: m.Updated}}
	if m.Kind == KindGroup {
		j.Group = m.Principal
	} else {
		j.User = m.Principal
	}
	return j
}

// DerivedMemberID makes a readable DNS label from a principal, with a short
// hash so "bob@x.io" and "bob@y.io" never collide.
func DerivedMemberID(kind PrincipalKind, principal string) string {
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
		base = string(kind)
	}
	sum := sha256.Sum256([]byte(string(kind) + ":" + principal))
	return base + "-" + hex.EncodeToString(sum[:3])
}

// CreateMember adds a member to team (of department dept); the team's
// virtual clusters get the new RBAC.
func (s *Service) CreateMember(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID, dept string, m Member) (Member, error) {
	row, err := insertMember(ctx, tx, m)
	if err != nil {
		return row, err
	}
	if err := workqueue.EnqueueTeam(ctx, tx, m.Team); err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "CreateMember", row.Name(), requestID, dept, m.Team, nil, row.Snapshot())
}

// UpdateMember locks the member, checks etag, lets check refuse a change
// to what cannot change, and sets the role.
func (s *Service) UpdateMember(ctx context.Context, tx *store.Tx, actor reqctx.Principal, dept, team, id, etag string, role Role, check func(cur Member) error) (Member, error) {
	cur, err := GetMember(ctx, tx, team, id, true)
	if err != nil {
		return cur, err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return cur, err
	}
	if err := check(cur); err != nil {
		return cur, err
	}
	row, err := updateMemberRole(ctx, tx, team, id, role)
	if err != nil {
		return row, err
	}
	if err := workqueue.EnqueueTeam(ctx, tx, team); err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "UpdateMember", row.Name(), "", dept, team, cur.Snapshot(), row.Snapshot())
}

// DeleteMember removes a member; the team's virtual clusters lose its RBAC.
func (s *Service) DeleteMember(ctx context.Context, tx *store.Tx, actor reqctx.Principal, dept, team, id, etag string) error {
	cur, err := GetMember(ctx, tx, team, id, true)
	if err != nil {
		return err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return err
	}
	if err := deleteMember(ctx, tx, team, id); err != nil {
		return err
	}
	if err := workqueue.EnqueueTeam(ctx, tx, team); err != nil {
		return err
	}
	return record(ctx, tx, actor, "DeleteMember", cur.Name(), "", dept, team, cur.Snapshot(), nil)
}

// memberExists is the error for a principal already on the team.
func memberExists(m Member) error {
	return errs.New(errs.KindAlreadyExists, errs.ReasonAlreadyExists,
		"%s %q is already a member of %s", m.Kind, m.Principal, names.Team(m.Team))
}
