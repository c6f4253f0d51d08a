package tenancy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/emptypb"
	"strconv"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Departments implements pb.DepartmentServiceServer.
type Departments struct {
	pb.UnimplementedDepartmentServiceServer
	*Service
}

const departmentColumns = `id, display_name, gpu_centi, cpu_millis, memory_bytes, admin_groups, version, create_time, update_time`

type departmentRow struct {
	ID, DisplayName string
	Budget          quota.Resources
	AdminGroups     []string
	Version         int64
	Created, Update time.Time
}

func scanDepartment(row pgx.Row) (departmentRow, error) {
	var d departmentRow
	err := row.Scan(&d.ID, &d.DisplayName, &d.Budget.GPU, &d.Budget.CPUMillis, &d.Budget.MemoryBytes,
		&d.AdminGroups, &d.Version, &d.Created, &d.Update)
	return d, err
}

func (d departmentRow) proto() *pb.Department {
	return &pb.Department{
		Name:        names.Department(d.ID),
		DisplayName: d.DisplayName,
		QuotaBudget: QuotaToProto(d.Budget),
		AdminGroups: d.AdminGroups,
		Etag:        Etag(d.Version, d.Update),
		CreateTime:  ts(d.Created),
		UpdateTime:  ts(d.Update),
	}
}

func getDepartment(ctx context.Context, q pgx.Tx, id string, lock bool) (departmentRow, error) {
	sql := `SELECT ` + departmentColumns + ` FROM departments WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	d, err := scanDepartment(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, errs.NotFound(names.Department(id))
	}
	return d, err
}

func validateGroups(v *errs.Violations, field string, groups []string) []string {
	out := make([]string, 0, len(groups))
	for i, g := range groups {
		g = strings.TrimSpace(g)
		if g == "" || len(g) > 256 || strings.ContainsRune(g, 0) {
			v.Add(field, "entry %d must be 1 to 256 characters, without NUL", i)
			continue
		}
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	if len(out) > 64 {
		v.Add(field, "at most 64 groups")
	}
	return out
}

func (s *Departments) GetDepartment(ctx context.Context, req *pb.GetDepartmentRequest) (*pb.Department, error) {
	id, err := names.ParseDepartment("name", req.GetName())
	if err != nil {
		return nil, err
	}
	a, err := s.Access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.CanReadDepartment(id) {
		return nil, errs.NotFound(req.GetName())
	}
	d, err := scanDepartment(s.Pool.QueryRow(ctx, `SELECT `+departmentColumns+` FROM departments WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.NotFound(req.GetName())
	}
	if err != nil {
		return nil, err
	}
	return d.proto(), nil
}

var departmentFilter = filter.Schema{
	"display_name": {Column: "display_name", Type: filter.String, Prefix: true},
}

func (s *Departments) ListDepartments(ctx context.Context, req *pb.ListDepartmentsRequest) (*pb.ListDepartmentsResponse, error) {
	a, err := s.Access(ctx)
	if err != nil {
		return nil, err
	}
	q, err := store.NewList(req.GetPageSize(), req.GetFilter(), departmentFilter)
	if err != nil {
		return nil, err
	}
	scope := "departments|" + req.GetFilter()
	after, err := decodeIDCursor(req.GetPageToken(), scope)
	if err != nil {
		return nil, err
	}
	q.Where("id > " + q.Arg(after))
	if !a.PlatformAdmin {
		q.Where("id = ANY(" + q.Arg(append(a.AdminDepartments(), a.MemberDepartments()...)) + ")")
	}
	list, more, err := store.FetchPage(ctx, s.Pool, q, `SELECT `+departmentColumns+` FROM departments`, "id", scanDepartment)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListDepartmentsResponse{}
	if more {
		resp.NextPageToken = store.EncodePageToken(scope, list[len(list)-1].ID)
	}
	for _, d := range list {
		resp.Departments = append(resp.Departments, d.proto())
	}
	return resp, nil
}

func (s *Departments) CreateDepartment(ctx context.Context, req *pb.CreateDepartmentRequest) (*pb.Department, error) {
	a, err := s.Access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins create departments")
	}
	var v errs.Violations
	names.ValidateID(&v, "department_id", req.GetDepartmentId())
	d := req.GetDepartment()
	if d == nil {
		v.Add("department", "required")
		return nil, v.Err()
	}
	checkDisplayName(&v, "department.display_name", d.GetDisplayName())
	budget := QuotaFromProto(&v, "department.quota_budget", d.GetQuotaBudget())
	groups := validateGroups(&v, "department.admin_groups", d.GetAdminGroups())
	if err := v.Err(); err != nil {
		return nil, err
	}
	var out *pb.Department
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		out, err = Idempotent(ctx, tx, a.Principal.Subject, "CreateDepartment", req.GetRequestId(), req,
			func() *pb.Department { return &pb.Department{} },
			func() (*pb.Department, error) {
				if err := LockCluster(ctx, tx); err != nil {
					return nil, err
				}
				cluster, err := s.ClusterNode(ctx, tx, req.GetDepartmentId())
				if err != nil {
					return nil, err
				}
				if err := quota.FitError("department.quota_budget", quota.CheckFit([]quota.Node{cluster}, budget)); err != nil {
					return nil, err
				}
				row, err := scanDepartment(tx.QueryRow(ctx, `
					INSERT INTO departments (id, display_name, gpu_centi, cpu_millis, memory_bytes, admin_groups)
					VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+departmentColumns,
					req.GetDepartmentId(), d.GetDisplayName(), budget.GPU, budget.CPUMillis, budget.MemoryBytes, groups))
				if err != nil {
					if errs.KindOf(store.Classify(err)) == errs.KindAlreadyExists {
						return nil, errs.AlreadyExists(names.Department(req.GetDepartmentId()))
					}
					return nil, err
				}
				res := row.proto()
				return res, audit.Record(ctx, tx, audit.Event{
					Actor: a.Principal, Action: "CreateDepartment", Resource: res.Name, RequestID: req.GetRequestId(),
					CorrelationID: s.correlationID(ctx), Department: row.ID, After: res,
				})
			})
		return err
	})
	return out, err
}

func (s *Departments) UpdateDepartment(ctx context.Context, req *pb.UpdateDepartmentRequest) (*pb.Department, error) {
	d := req.GetDepartment()
	if d == nil {
		return nil, errs.InvalidField("department", "required")
	}
	id, err := names.ParseDepartment("department.name", d.GetName())
	if err != nil {
		return nil, err
	}
	a, err := s.Access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.CanReadDepartment(id) {
		return nil, errs.NotFound(d.GetName())
	}
	if !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins change departments")
	}
	paths, err := maskPaths(req.GetUpdateMask().GetPaths(), "display_name", "quota_budget", "admin_groups")
	if err != nil {
		return nil, err
	}
	var v errs.Violations
	checkDisplayName(&v, "department.display_name", d.GetDisplayName())
	budget := QuotaFromProto(&v, "department.quota_budget", d.GetQuotaBudget())
	groups := validateGroups(&v, "department.admin_groups", d.GetAdminGroups())
	if err := v.Err(); err != nil {
		return nil, err
	}
	var out *pb.Department
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		if paths["quota_budget"] {
			if err := LockCluster(ctx, tx); err != nil {
				return err
			}
		}
		cur, err := getDepartment(ctx, tx, id, true)
		if err != nil {
			return err
		}
		before := cur.proto()
		if err := CheckEtag(d.GetName(), d.GetEtag(), before.Etag); err != nil {
			return err
		}
		next := cur
		if paths["display_name"] {
			next.DisplayName = d.GetDisplayName()
		}
		if paths["admin_groups"] {
			next.AdminGroups = groups
		}
		if paths["quota_budget"] {
			next.Budget = maskedQuota(paths, "quota_budget", cur.Budget, budget)
			cluster, err := s.ClusterNode(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := quota.FitError("department.quota_budget", quota.CheckFitChange([]quota.Node{cluster}, cur.Budget, next.Budget)); err != nil {
				return err
			}
			children, err := ChildrenOfDepartment(ctx, tx, id)
			if err != nil {
				return err
			}
			if err := BelowChildrenError("department.quota_budget", "department", d.GetName(), next.Budget, children); err != nil {
				return err
			}
		}
		row, err := scanDepartment(tx.QueryRow(ctx, `
			UPDATE departments SET display_name = $2, gpu_centi = $3, cpu_millis = $4, memory_bytes = $5,
			       admin_groups = $6, version = version + 1, update_time = now()
			 WHERE id = $1 RETURNING `+departmentColumns,
			id, next.DisplayName, next.Budget.GPU, next.Budget.CPUMillis, next.Budget.MemoryBytes, next.AdminGroups))
		if err != nil {
			return err
		}
		out = row.proto()
		if paths["quota_budget"] {
			// The department's KAI parent queue carries the budget.
			if err := workqueue.EnqueueDepartment(ctx, tx, id); err != nil {
				return err
			}
		}
		return audit.Record(ctx, tx, audit.Event{
			Actor: a.Principal, Action: "UpdateDepartment", Resource: out.Name,
			CorrelationID: s.correlationID(ctx), Department: id, Before: before, After: out,
		})
	})
	return out, err
}

func (s *Departments) DeleteDepartment(ctx context.Context, req *pb.DeleteDepartmentRequest) (*emptypb.Empty, error) {
	id, err := names.ParseDepartment("name", req.GetName())
	if err != nil {
		return nil, err
	}
	a, err := s.Access(ctx)
	if err != nil {
		return nil, err
	}
	if !a.CanReadDepartment(id) {
		return nil, errs.NotFound(req.GetName())
	}
	if !a.PlatformAdmin {
		return nil, errs.PermissionDenied("only platform admins delete departments")
	}
	err = store.InTx(ctx, s.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := getDepartment(ctx, tx, id, true)
		if err != nil {
			return err
		}
		before := cur.proto()
		if err := CheckEtag(req.GetName(), req.GetEtag(), before.Etag); err != nil {
			return err
		}
		var teams int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM teams WHERE department_id = $1`, id).Scan(&teams); err != nil {
			return err
		}
		if teams > 0 {
			return errs.FailedPrecondition(errs.ReasonHasChildren,
				"%s still has %d team(s); delete them first", req.GetName(), teams).With("teams", strconv.Itoa(teams))
		}
		if _, err := tx.Exec(ctx, `DELETE FROM departments WHERE id = $1`, id); err != nil {
			return hasDependents(err, req.GetName())
		}
		return audit.Record(ctx, tx, audit.Event{
			Actor: a.Principal, Action: "DeleteDepartment", Resource: req.GetName(),
			CorrelationID: s.correlationID(ctx), Department: id, Before: before,
		})
	})
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// hasDependents turns a foreign-key violation on delete into a clear error.
func hasDependents(err error, resource string) error {
	if store.SQLState(err) == "23503" {
		return errs.Wrap(err, errs.KindFailedPrecondition, errs.ReasonHasChildren,
			"%s is still referenced (requests or virtual clusters); delete those first", resource)
	}
	return err
}

// maskPaths validates an update mask against the allowed paths; empty or
// "*" selects them all.
//
// grpc-gateway derives the mask of a REST PATCH from the fields present in
// the body, so two more forms are accepted: output-only fields (name, etag,
// create_time, update_time), which are ignored rather than refused (a client
// sends the etag in the body to get the optimistic-concurrency check), and
// sub-fields of a quota ("quota.gpu"), which select the parent too and are
// applied by maskedQuota.
func maskPaths(paths []string, allowed ...string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(paths) == 0 || (len(paths) == 1 && paths[0] == "*") {
		for _, p := range allowed {
			out[p] = true
		}
		return out, nil
	}
	whole := map[string]bool{}
	for _, p := range paths {
		switch parent, sub, _ := strings.Cut(p, "."); {
		case slices.Contains(allowed, p):
			out[p], whole[p] = true, true
		case slices.Contains(outputOnlyPaths, p):
		case slices.Contains(allowed, parent) && slices.Contains(quotaParents, parent) && isQuotaField(sub):
			out[parent], out[p] = true, true
		default:
			return nil, errs.InvalidField("update_mask", "path %q cannot be updated; updatable: %s", p, strings.Join(allowed, ", "))
		}
	}
	// A whole quota in the mask wins over its sub-fields.
	for p := range out {
		if parent, _, ok := strings.Cut(p, "."); ok && whole[parent] {
			delete(out, p)
		}
	}
	return out, nil
}

// outputOnlyPaths may appear in a mask but are never updated. Immutable
// fields (a team's department, a member's principal) are listed too, so a
// client can PATCH back a whole object it read; the handlers refuse a
// changed value.
var outputOnlyPaths = []string{"name", "etag", "create_time", "update_time", "department", "user", "group"}

// quotaParents are the Quota-typed fields whose sub-fields a mask may name.
var quotaParents = []string{"quota", "quota_budget"}

func isQuotaField(f string) bool {
	for _, k := range quota.AllResources {
		if k.Field() == f {
			return true
		}
	}
	return false
}

// maskedQuota is the quota an update leaves: body when the mask names field
// as a whole, otherwise cur with only the masked sub-fields taken from body.
func maskedQuota(paths map[string]bool, field string, cur, body quota.Resources) quota.Resources {
	next, partial := cur, false
	for _, k := range quota.AllResources {
		if paths[field+"."+k.Field()] {
			next, partial = next.With(k, body.Get(k)), true
		}
	}
	if !partial {
		return body
	}
	return next
}
