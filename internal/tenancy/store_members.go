package tenancy

// The members table: every statement on it is in this file.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
)

const memberColumns = `team_id, id, principal_kind, principal, role, version, create_time, update_time`

func scanMember(row pgx.Row) (Member, error) {
	var m Member
	err := row.Scan(&m.Team, &m.ID, &m.Kind, &m.Principal, &m.Role, &m.Version, &m.Created, &m.Updated)
	return m, err
}

// GetMember reads a member; lock takes a row lock (in a Tx).
func GetMember(ctx context.Context, q store.Querier, team, id string, lock bool) (Member, error) {
	return store.GetOne(ctx, q, `SELECT `+memberColumns+` FROM members WHERE team_id = $1 AND id = $2`, lock, scanMember,
		errs.NotFound(names.Member(team, id)), team, id)
}

// MembersOfTeam returns every member of a team (for rendering RBAC).
func MembersOfTeam(ctx context.Context, q store.Querier, team string) ([]Member, error) {
	rows, err := q.Query(ctx, `SELECT `+memberColumns+` FROM members WHERE team_id = $1 ORDER BY id`, team)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) { return scanMember(r) })
}

func insertMember(ctx context.Context, tx *store.Tx, m Member) (Member, error) {
	row, err := scanMember(tx.QueryRow(ctx, `
		INSERT INTO members (team_id, id, principal_kind, principal, role)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+memberColumns,
		m.Team, m.ID, m.Kind, m.Principal, m.Role))
	if err != nil && errs.KindOf(store.Classify(err)) == errs.KindAlreadyExists {
		if store.ConstraintName(err) == "members_principal_unique" {
			return row, memberExists(m)
		}
		return row, errs.AlreadyExists(names.Member(m.Team, m.ID))
	}
	return row, err
}

func updateMemberRole(ctx context.Context, tx *store.Tx, team, id string, role Role) (Member, error) {
	return scanMember(tx.QueryRow(ctx, `UPDATE members SET role = $3, version = version + 1, update_time = now()
		WHERE team_id = $1 AND id = $2 RETURNING `+memberColumns, team, id, role))
}

func deleteMember(ctx context.Context, tx *store.Tx, team, id string) error {
	_, err := tx.Exec(ctx, `DELETE FROM members WHERE team_id = $1 AND id = $2`, team, id)
	return err
}

var memberFilter = filter.Schema{
	"role":  {Column: "role", Type: filter.Enum, Enum: []string{string(RoleOwner), string(RoleMember), string(RoleViewer)}},
	"user":  {Column: "CASE WHEN principal_kind = 'user' THEN principal END", Type: filter.String},
	"group": {Column: "CASE WHEN principal_kind = 'group' THEN principal END", Type: filter.String},
}

// ListMembers returns a page of a team's members by id, and whether more
// follow.
func ListMembers(ctx context.Context, q store.Querier, team string, o ListOptions) ([]Member, bool, error) {
	lq, err := store.NewList(o.PageSize, o.Filter, memberFilter)
	if err != nil {
		return nil, false, err
	}
	lq.Where("team_id = " + lq.Arg(team))
	lq.Where("id > " + lq.Arg(o.After))
	return store.FetchPage(ctx, q, lq, `SELECT `+memberColumns+` FROM members`, "id", scanMember)
}

// Grant is one row of what a caller holds: a team role through a member
// entry, or admin of a department through one of its admin groups.
type Grant struct {
	Team, Department string
	Role             Role   // "" for a department grant
	Member           string // the member id that grants the role
}

// GrantsOf loads, in one query, every team role a user (by name or group)
// holds and every department its groups administer.
func GrantsOf(ctx context.Context, q store.Querier, username string, groups []string) ([]Grant, error) {
	if groups == nil {
		groups = []string{}
	}
	rows, err := q.Query(ctx, `
		SELECT m.team_id, t.department_id, m.role, m.id
		  FROM members m JOIN teams t ON t.id = m.team_id
		 WHERE (m.principal_kind = 'user' AND m.principal = $1)
		    OR (m.principal_kind = 'group' AND m.principal = ANY($2))
		UNION ALL
		SELECT '', d.id, '', ''
		  FROM departments d
		 WHERE d.admin_groups && $2`, username, groups)
	if err != nil {
		return nil, store.Classify(err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Grant, error) {
		var g Grant
		return g, r.Scan(&g.Team, &g.Department, &g.Role, &g.Member)
	})
}
