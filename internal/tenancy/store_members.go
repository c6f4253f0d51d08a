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

// grantsSQL is GrantsOf's query as a WITH clause (user $1, groups $2), for
// reads that load an object and the caller's grants in one statement.
const grantsSQL = `
	WITH grants (team_id, department_id, role, member_id) AS (
		SELECT m.team_id, t.department_id, m.role, m.id
		  FROM members m JOIN teams t ON t.id = m.team_id
		 WHERE (m.principal_kind = 'user' AND m.principal = $1)
		    OR (m.principal_kind = 'group' AND m.principal = ANY($2))
		UNION ALL
		SELECT '', d.id, '', ''
		  FROM departments d
		 WHERE d.admin_groups && $2)
	`

// GetTeamWithGrants is GetTeam (without lock) and GrantsOf in one
// statement: one round trip for the read every team-scoped call starts
// with, shared with concurrent callers' reads (store.DB.SendShared). A
// missing team is NOT_FOUND and loads no grants.
func GetTeamWithGrants(ctx context.Context, db *store.DB, id, username string, groups []string) (Team, []Grant, error) {
	var b store.Batch
	var t Team
	var grants []Grant
	QueueTeamWithGrants(&b, &t, &grants, id, username, groups)
	err := db.SendShared(ctx, &b)
	return t, grants, err
}

// QueueTeamWithGrants is GetTeamWithGrants, queued in b.
func QueueTeamWithGrants(b *store.Batch, t *Team, grants *[]Grant, id, username string, groups []string) {
	if groups == nil {
		groups = []string{}
	}
	store.QueueOne(b, t, grantsSQL+`
		SELECT `+teamColumns+`,
		       ARRAY(SELECT team_id FROM grants), ARRAY(SELECT department_id FROM grants),
		       ARRAY(SELECT role FROM grants), ARRAY(SELECT member_id FROM grants)
		  FROM teams WHERE id = $3`, false,
		func(row pgx.Row) (Team, error) {
			var g struct{ teams, departments, roles, members []string }
			team, err := scanTeamWith(row, &g.teams, &g.departments, &g.roles, &g.members)
			if err != nil {
				return team, err
			}
			out := make([]Grant, len(g.teams))
			for i := range out {
				out[i] = Grant{Team: g.teams[i], Department: g.departments[i], Role: Role(g.roles[i]), Member: g.members[i]}
			}
			*grants = out
			return team, nil
		}, errs.NotFound(names.Team(id)), username, groups, id)
}

// QueueGrantsOf is GrantsOf, queued in b (store.DB.Send).
func QueueGrantsOf(b *store.Batch, dst *[]Grant, username string, groups []string) {
	if groups == nil {
		groups = []string{}
	}
	store.QueueMany(b, dst, scanGrant, grantsSQL+`SELECT team_id, department_id, role, member_id FROM grants`, username, groups)
}

// GrantsOf loads, in one query, every team role a user (by name or group)
// holds and every department its groups administer. Every call starts with
// it, so it is a shared read (store.DB.SendShared): concurrent callers'
// grants go out in one round trip, not one each.
func GrantsOf(ctx context.Context, db *store.DB, username string, groups []string) ([]Grant, error) {
	var b store.Batch
	var grants []Grant
	QueueGrantsOf(&b, &grants, username, groups)
	err := db.SendShared(ctx, &b)
	return grants, err
}

func scanGrant(row pgx.Row) (Grant, error) {
	var g Grant
	return g, row.Scan(&g.Team, &g.Department, &g.Role, &g.Member)
}
