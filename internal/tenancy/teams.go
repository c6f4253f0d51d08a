package tenancy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Teams implements pb.TeamServiceServer.
type Teams struct {
	pb.UnimplementedTeamServiceServer
	*Service
}

const teamColumns = `id, department_id, display_name, isolation_tier, node_pool, gpu_centi, cpu_millis, memory_bytes, version, create_time, update_time`

// TeamRow is a stored team.
type TeamRow struct {
	ID, Department, DisplayName, Tier string
	// Pool is the team's node pool: names.SharedPool for SHARED teams,
	// the team's own for DEDICATED ones.
	Pool             string
	Quota            quota.Resources
	Version          int64
	Created, Updated time.Time
}

func scanTeam(row pgx.Row) (TeamRow, error) {
	var t TeamRow
	err := row.Scan(&t.ID, &t.Department, &t.DisplayName, &t.Tier, &t.Pool, &t.Quota.GPU, &t.Quota.CPUMillis,
		&t.Quota.MemoryBytes, &t.Version, &t.Created, &t.Updated)
	return t, err
}

func (t TeamRow) Proto() *pb.Team {
	return &pb.Team{
		Name:          names.Team(t.ID),
		Department:    names.Department(t.Department),
		DisplayName:   t.DisplayName,
		IsolationTier: pb.IsolationTier(pb.IsolationTier_value[t.Tier]),
		Quota:         QuotaToProto(t.Quota),
		NodePool:      t.Pool,
		Etag:          Etag(t.Version, t.Updated),
		CreateTime:    ts(t.Created),
		UpdateTime:    ts(t.Updated),
	}
}

// Querier is satisfied by a pool and a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// GetTeam reads a team; lock takes a row lock (inside a transaction).
func GetTeam(ctx context.Context, q Querier, id string, lock bool) (TeamRow, error) {
	sql := `SELECT ` + teamColumns + ` FROM teams WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	t, err := scanTeam(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, errs.NotFound(names.Team(id))
	}
	return t, err
}

// ReadableTeam returns the team when the caller may read it and NOT_FOUND
// otherwise (foreign teams look absent), together with the caller's access
// it loaded, so handlers do not load it a second time.
func (s *Service) ReadableTeam(ctx context.Context, field, name string) (TeamRow, *identity.Access, error) {
	id, err := names.ParseTeam(field, name)
	if err != nil {
		return TeamRow{}, nil, err
	}
	a, err := s.Access(ctx)
	if err != nil {
		return TeamRow{}, nil, err
	}
	t, err := GetTeam(ctx, s.Pool, id, false)
	if err != nil {
		return t, nil, err
	}
	if !a.CanReadTeam(t.ID, t.Department) {
		return TeamRow{}, nil, errs.NotFound(name)
	}
	return t, a, nil
}

func parseTier(v *errs.Violations, field string, tier pb.IsolationTier, required bool) string {
	switch tier {
	case pb.IsolationTier_SHARED, pb.IsolationTier_DEDICATED:
		return tier.String()
	case pb.IsolationTier_ISOLATION_TIER_UNSPECIFIED:
		if required {
			return pb.IsolationTier_SHARED.String()
		}
	}
	v.Add(field, "must be SHARED or DEDICATED")
	return ""
}

// resolvePool is the node pool of a team of tier when the caller asks for
// asked ("" = the tier's default), and whether that is a choice other than
// the default, which only platform admins may make: a pool is physical
// nodes.
func resolvePool(v *errs.Violations, field, tier, team, asked string) (pool string, custom bool) {
	switch tier {
	case pb.IsolationTier_SHARED.String():
		if asked != "" && asked != names.SharedPool {
			v.Add(field, "SHARED teams run in the shared pool %q; only DEDICATED teams have a node pool of their own", names.SharedPool)
		}
		return names.SharedPool, false
	case pb.IsolationTier_DEDICATED.String():
		def := names.DedicatedPool(team)
		if asked == "" || asked == def {
			return def, false
		}
		if why := names.CheckPool(asked); why != "" {
			v.Add(field, "%q: %s", asked, why)
			return "", false
		}
		return asked, true
	}
	return "", false
}

// poolTaken is the error for a node pool another DEDICATED team already has.
func poolTaken(field, pool string) error {
	e := errs.FailedPrecondition(errs.ReasonTierViolation, "node pool %q is already dedicated to another team", pool).With("node_pool", pool)
	e.Violations = []errs.FieldViolation{{Field: field, Description: fmt.Sprintf("node pool %q is already dedicated to another team; choose another one", pool)}}
	return e
}

func (s *Teams) GetTeam(ctx context.Context, req *pb.GetTeamRequest) (*pb.Team, error) {
	t, _, err := s.ReadableTeam(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	return t.Proto(), nil
}

var teamFilter = filter.Schema{
	"department":     {Column: "department_id", Type: filter.String, Strip: "departments/"},
	"isolation_tier": {Column: "isolation_tier", Type: filter.Enum, Enum: []string{"SHARED", "DEDICATED"}},
	"display_name":   {Column: "display_name", Type: filter.String, Prefix: true},
}

func (s *Teams) ListTeams(ctx context.Context, req *pb.ListTeamsRequest) (*pb.ListTeamsResponse, error) {
	a, err := s.Access(ctx)
	if err != nil {
		return nil, err
	}
	q, err := store.NewList(req.GetPageSize(), req.GetFilter(), teamFilter)
	if err != nil {
		return nil, err
	}
	scope := "teams|" + req.GetFilter()
	after, err := decodeIDCursor(req.GetPageToken(), scope)
	if err != nil {
		return nil, err
	}
	q.Where("id > " + q.Arg(after))
	if !a.PlatformAdmin {
		q.Where("id = ANY(" + q.Arg(a.ReadableTeams()) + ") OR department_id = ANY(" + q.Arg(a.AdminDepartments()) + ")")
	}
	list, more, err := store.FetchPage(ctx, s.Pool, q, `SELECT `+teamColumns+` FROM teams`, "id", scanTeam)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListTeamsResponse{}
	if more {
		resp.NextPageToken = store.EncodePageToken(scope, list[len(list)-1].ID)
	}
	for _, t := range list {
		resp.Teams = append(resp.Teams, t.Proto())
	}
	return resp, nil
}

func (s *Teams) CreateTeam(ctx context.Context, req *pb.CreateTeamRequest) (*pb.Team, error) {
	var v errs.Violations
	names.ValidateID(&v, "team_id", req.GetTeamId())
	t := req.GetTeam()
	if t == nil {
		v.Add("team", "required")
		return nil, v.Err()
	}
	dept, derr := names.ParseDepartment("team.department", t.GetDepartment())
	if derr != nil {
		de, _ := errs.As(derr)
		v = append(v, de.Violations...)
	}
	checkDisplayName(&v, "team.display_name", t.GetDisplayName())
	tier := parseTier(&v, "team.isolation_tier", t.GetIsolationTier(), true)
	pool, customPool := resolvePool(&v, "team.node_pool", tier, req.GetTeamId(), t.GetNodePool())
	q := QuotaFromProto(&v, "team.quota", t.GetQuota())
	if tier == "DEDICATED" && !q.GPU.IsWhole() {
		v.Add("team.quota.gpu", "DEDICATED teams get whole GPUs only (got %s): KAI does not isolate GPU memory", q.GPU)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	a, err := s.Access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.CanReadDepartment(dept) {
		return nil, errs.NotFound(t.GetDepartment())
	}
	if !a.CanManageTeam(dept) {
		return nil, errs.PermissionDenied("only platform admins and admins of %s create teams in it", t.GetDepartment())
	}
	if customPool && !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins choose a DEDICATED team's node pool; leave node_pool empty for the default %q", names.DedicatedPool(req.GetTeamId()))
	}
	var out *pb.Team
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		out, err = Idempotent(ctx, tx, a.Principal.Subject, "CreateTeam", req.GetRequestId(), req,
			func() *pb.Team { return &pb.Team{} },
			func() (*pb.Team, error) {
				budget, err := LockDepartment(ctx, tx, dept)
				if err != nil {
					return nil, err
				}
				node, err := DepartmentNode(ctx, tx, dept, budget, req.GetTeamId())
				if err != nil {
					return nil, err
				}
				path := []quota.Node{node}
				if pn, ok, err := s.PoolNode(ctx, tx, pool, req.GetTeamId()); err != nil {
					return nil, err
				} else if ok {
					path = append(path, pn)
				}
				if err := FitError("team.quota", quota.CheckFit(path, q)); err != nil {
					return nil, err
				}
				row, err := scanTeam(tx.QueryRow(ctx, `
					INSERT INTO teams (id, department_id, display_name, isolation_tier, node_pool, gpu_centi, cpu_millis, memory_bytes)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+teamColumns,
					req.GetTeamId(), dept, t.GetDisplayName(), tier, pool, q.GPU, q.CPUMillis, q.MemoryBytes))
				if err != nil {
					if store.ConstraintName(err) == "teams_dedicated_node_pool" {
						return nil, poolTaken("team.node_pool", pool)
					}
					if errs.KindOf(store.Classify(err)) == errs.KindAlreadyExists {
						return nil, errs.AlreadyExists(names.Team(req.GetTeamId()))
					}
					return nil, err
				}
				res := row.Proto()
				return res, audit.Record(ctx, tx, audit.Event{
					Actor: a.Principal, Action: "CreateTeam", Resource: res.Name, RequestID: req.GetRequestId(),
					CorrelationID: s.correlationID(ctx), Department: dept, Team: row.ID, After: res,
				})
			})
		return err
	})
	return out, err
}

func (s *Teams) UpdateTeam(ctx context.Context, req *pb.UpdateTeamRequest) (*pb.Team, error) {
	t := req.GetTeam()
	if t == nil {
		return nil, errs.InvalidField("team", "required")
	}
	cur, a, err := s.ReadableTeam(ctx, "team.name", t.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageTeam(cur.Department) {
		return nil, errs.PermissionDenied("only platform admins and department admins change teams; team owners ask through a CHANGE_TEAM_QUOTA request")
	}
	paths, err := maskPaths(req.GetUpdateMask().GetPaths(), "display_name", "isolation_tier", "quota", "node_pool")
	if err != nil {
		return nil, err
	}
	var v errs.Violations
	checkDisplayName(&v, "team.display_name", t.GetDisplayName())
	var tier string
	if paths["isolation_tier"] {
		tier = parseTier(&v, "team.isolation_tier", t.GetIsolationTier(), false)
	}
	q := QuotaFromProto(&v, "team.quota", t.GetQuota())
	if err := v.Err(); err != nil {
		return nil, err
	}
	var out *pb.Team
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		budget, err := LockDepartment(ctx, tx, cur.Department)
		if err != nil {
			return err
		}
		cur, err := GetTeam(ctx, tx, cur.ID, true)
		if err != nil {
			return err
		}
		before := cur.Proto()
		if err := CheckEtag(t.GetName(), t.GetEtag(), before.Etag); err != nil {
			return err
		}
		if (t.GetDepartment() != "" || slices.Contains(req.GetUpdateMask().GetPaths(), "department")) && t.GetDepartment() != before.Department {
			return errs.InvalidField("team.department", "a team cannot move to another department (it is %s)", before.Department)
		}
		next := cur
		if paths["display_name"] {
			next.DisplayName = t.GetDisplayName()
		}
		if paths["isolation_tier"] {
			next.Tier = tier
		}
		if paths["quota"] {
			next.Quota = maskedQuota(paths, "quota", cur.Quota, q)
		}
		if paths["node_pool"] || next.Tier != cur.Tier {
			asked := ""
			if paths["node_pool"] {
				asked = t.GetNodePool()
			}
			var v errs.Violations
			pool, custom := resolvePool(&v, "team.node_pool", next.Tier, cur.ID, asked)
			if err := v.Err(); err != nil {
				return err
			}
			if custom && pool != cur.Pool && !a.PlatformAdmin {
				return errs.PermissionDenied("only platform admins choose a DEDICATED team's node pool; leave node_pool empty for the default %q", names.DedicatedPool(cur.ID))
			}
			next.Pool = pool
		}
		if next.Tier == "DEDICATED" {
			if !next.Quota.GPU.IsWhole() {
				return errs.InvalidField("team.quota.gpu", "DEDICATED teams get whole GPUs only (got %s)", next.Quota.GPU)
			}
			var fractional int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM virtual_clusters WHERE team_id = $1
				AND (allow_fractional_gpus OR gpu_centi % 100 <> 0) AND `+activeVCPhases, cur.ID).Scan(&fractional); err != nil {
				return err
			}
			if fractional > 0 && cur.Tier != "DEDICATED" {
				return errs.FailedPrecondition(errs.ReasonTierViolation,
					"%s has %d virtual cluster(s) using fractional GPUs; resize them before moving the team to DEDICATED", t.GetName(), fractional)
			}
		}
		var shortfalls []quota.Shortfall
		if paths["quota"] {
			node, err := DepartmentNode(ctx, tx, cur.Department, budget, cur.ID)
			if err != nil {
				return err
			}
			shortfalls = quota.CheckFitChange([]quota.Node{node}, cur.Quota, next.Quota)
		}
		if paths["quota"] || next.Pool != cur.Pool {
			// In a new pool the whole quota must fit, not just its growth.
			if pn, ok, err := s.PoolNode(ctx, tx, next.Pool, cur.ID); err != nil {
				return err
			} else if ok && next.Pool != cur.Pool {
				shortfalls = append(shortfalls, quota.CheckFit([]quota.Node{pn}, next.Quota)...)
			} else if ok {
				shortfalls = append(shortfalls, quota.CheckFitChange([]quota.Node{pn}, cur.Quota, next.Quota)...)
			}
		}
		if err := FitError("team.quota", shortfalls); err != nil {
			return err
		}
		if paths["quota"] {
			children, err := ChildrenOfTeam(ctx, tx, cur.ID)
			if err != nil {
				return err
			}
			if err := BelowChildrenError("team.quota", "team", t.GetName(), next.Quota, children); err != nil {
				return err
			}
		}
		row, err := scanTeam(tx.QueryRow(ctx, `
			UPDATE teams SET display_name = $2, isolation_tier = $3, gpu_centi = $4, cpu_millis = $5, memory_bytes = $6,
			       node_pool = $7, version = version + 1, update_time = now()
			 WHERE id = $1 RETURNING `+teamColumns,
			cur.ID, next.DisplayName, next.Tier, next.Quota.GPU, next.Quota.CPUMillis, next.Quota.MemoryBytes, next.Pool))
		if err != nil {
			if store.ConstraintName(err) == "teams_dedicated_node_pool" {
				return poolTaken("team.node_pool", next.Pool)
			}
			return err
		}
		out = row.Proto()
		if err := workqueue.EnqueueTeam(ctx, tx, cur.ID); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{
			Actor: a.Principal, Action: "UpdateTeam", Resource: out.Name, CorrelationID: s.correlationID(ctx),
			Department: cur.Department, Team: cur.ID, Before: before, After: out,
		})
	})
	return out, err
}

func (s *Teams) DeleteTeam(ctx context.Context, req *pb.DeleteTeamRequest) (*emptypb.Empty, error) {
	cur, a, err := s.ReadableTeam(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	if !a.CanManageTeam(cur.Department) {
		return nil, errs.PermissionDenied("only platform admins and department admins delete teams")
	}
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := LockDepartment(ctx, tx, cur.Department); err != nil {
			return err
		}
		cur, err := GetTeam(ctx, tx, cur.ID, true)
		if err != nil {
			return err
		}
		before := cur.Proto()
		if err := CheckEtag(req.GetName(), req.GetEtag(), before.Etag); err != nil {
			return err
		}
		var live int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM virtual_clusters WHERE team_id = $1 AND phase NOT IN ('DELETED', 'REJECTED')`, cur.ID).Scan(&live); err != nil {
			return err
		}
		if live > 0 {
			return errs.FailedPrecondition(errs.ReasonHasChildren,
				"%s still has %d virtual cluster(s); delete them first", req.GetName(), live).With("virtual_clusters", strconv.Itoa(live))
		}
		// Finished requests and gone virtual clusters are history: the audit
		// log keeps it, the rows go with the team.
		for _, sql := range []string{
			`DELETE FROM requests WHERE team_id = $1`,
			`DELETE FROM virtual_clusters WHERE team_id = $1`,
			`DELETE FROM teams WHERE id = $1`,
		} {
			if _, err := tx.Exec(ctx, sql, cur.ID); err != nil {
				return hasDependents(err, req.GetName())
			}
		}
		return audit.Record(ctx, tx, audit.Event{
			Actor: a.Principal, Action: "DeleteTeam", Resource: req.GetName(), CorrelationID: s.correlationID(ctx),
			Department: cur.Department, Team: cur.ID, Before: before,
		})
	})
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}
