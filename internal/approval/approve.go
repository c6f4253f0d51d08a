package approval

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/policy"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// fitOutcome is the "will it fit" answer for one request.
type fitOutcome struct {
	field      string
	shortfalls []quota.Shortfall
	below      []quota.BelowAllocation
	children   error
}

func (o fitOutcome) fits() bool {
	return len(o.shortfalls) == 0 && len(o.below) == 0 && o.children == nil
}

// err is the error an approval fails with: FAILED_PRECONDITION naming the
// level, the resource and how much is free.
func (o fitOutcome) err() error {
	if len(o.shortfalls) > 0 {
		err := quota.FitError(o.field, o.shortfalls)
		if e, ok := errs.As(err); ok {
			e.Kind = errs.KindFailedPrecondition
			first := o.shortfalls[0]
			e.Message = fmt.Sprintf("does not fit in %s %s: %s free, %s requested (%s)",
				first.Level, first.Name, first.Free, first.Requested, first.Resource)
			e.With("free", first.Free).With("requested", first.Requested)
		}
		return err
	}
	if o.children != nil {
		return o.children
	}
	return quota.ShrinkError(o.field, o.below)
}

func (o fitOutcome) proto() *pb.FitResult {
	res := &pb.FitResult{Fits: o.fits()}
	for _, s := range o.shortfalls {
		res.Shortfalls = append(res.Shortfalls, &pb.Shortfall{
			Level: string(s.Level), Name: s.Name, Resource: string(s.Resource),
			Requested: s.Requested, Free: s.Free, Capacity: s.Capacity, Message: s.String(),
		})
	}
	for _, b := range o.below {
		res.Shortfalls = append(res.Shortfalls, &pb.Shortfall{
			Level: "allocation", Resource: string(b.Resource), Requested: b.Requested, Message: b.String(),
		})
	}
	if e, ok := errs.As(o.children); ok {
		for _, v := range e.Violations {
			res.Shortfalls = append(res.Shortfalls, &pb.Shortfall{Level: "children", Name: e.Metadata["name"], Message: v.Description})
		}
	}
	return res
}

// checkFit computes the fit of d for team inside tx. For approvals the
// caller holds the department lock so the answer stays true until commit.
func (s *Service) checkFit(ctx context.Context, tx pgx.Tx, team tenancy.TeamRow, d desired) (fitOutcome, error) {
	switch d.kind {
	case pb.Request_CREATE_VIRTUAL_CLUSTER.String():
		o := fitOutcome{field: "request.create_virtual_cluster.spec.quota"}
		node, err := tenancy.TeamNode(ctx, tx, team.ID, team.Quota, d.vcID)
		if err != nil {
			return o, err
		}
		o.shortfalls = quota.CheckFit([]quota.Node{node}, d.quota)
		return o, nil
	case pb.Request_CHANGE_VIRTUAL_CLUSTER_QUOTA.String():
		o := fitOutcome{field: "request.change_virtual_cluster_quota.quota"}
		vc, err := GetVirtualClusterRow(ctx, tx, d.vcID, false)
		if err != nil {
			return o, err
		}
		node, err := tenancy.TeamNode(ctx, tx, team.ID, team.Quota, d.vcID)
		if err != nil {
			return o, err
		}
		o.shortfalls = quota.CheckFitChange([]quota.Node{node}, vc.Quota, d.quota)
		o.below = quota.ShrinkCheck(d.quota, vc.Allocated, d.accept)
		return o, nil
	case pb.Request_CHANGE_TEAM_QUOTA.String():
		o := fitOutcome{field: "request.change_team_quota.quota"}
		var budget quota.Resources
		if err := tx.QueryRow(ctx, `SELECT gpu_centi, cpu_millis, memory_bytes FROM departments WHERE id = $1`, team.Department).
			Scan(&budget.GPU, &budget.CPUMillis, &budget.MemoryBytes); err != nil {
			return o, err
		}
		node, err := tenancy.DepartmentNode(ctx, tx, team.Department, budget, team.ID)
		if err != nil {
			return o, err
		}
		o.shortfalls = quota.CheckFitChange([]quota.Node{node}, team.Quota, d.quota)
		children, err := tenancy.ChildrenOfTeam(ctx, tx, team.ID)
		if err != nil {
			return o, err
		}
		o.children = tenancy.BelowChildrenError(o.field, "team", names.Team(team.ID), d.quota, children)
		allocated, err := tenancy.AllocatedToTeam(ctx, tx, team.ID)
		if err != nil {
			return o, err
		}
		o.below = quota.ShrinkCheck(d.quota, allocated, d.accept)
		return o, nil
	}
	return fitOutcome{}, nil
}

// approve moves a pending request to APPROVED and makes its change in the
// database, enqueueing host-cluster work in the same transaction. The caller
// holds the department lock and the request row lock.
func (s *Service) approve(ctx context.Context, tx pgx.Tx, r *RequestRow, actor identity.Principal, decider, reason, policyID string) error {
	if !CanTransition(r.State, StateApproved) {
		return transitionError(names.Request(r.ID), r.State, StateApproved)
	}
	team, err := tenancy.GetTeam(ctx, tx, r.Team, true)
	if err != nil {
		return err
	}
	d := desiredFromRow(*r)
	if et := d.spec.GetExpireTime(); et != nil && !et.AsTime().After(s.now()) {
		return errs.FailedPrecondition(errs.ReasonInvalidTransition,
			"%s asks for a virtual cluster whose expire_time (%s) has already passed; reject it or ask again",
			names.Request(r.ID), et.AsTime().Format(time.RFC3339))
	}
	fit, err := s.checkFit(ctx, tx, team, d)
	if err != nil {
		return err
	}
	if !fit.fits() {
		return fit.err()
	}
	before := r.Proto()
	var target *int64
	state := StateApproved
	switch d.kind {
	case pb.Request_CREATE_VIRTUAL_CLUSTER.String():
		gen, err := s.moveVirtualCluster(ctx, tx, actor, team.Department, d.vcID, PhaseProvisioning, false, nil, nil, "", "")
		if err != nil {
			return err
		}
		target = &gen
	case pb.Request_CHANGE_VIRTUAL_CLUSTER_QUOTA.String():
		gen, err := s.moveVirtualCluster(ctx, tx, actor, team.Department, d.vcID, PhaseProvisioning, true, &d.quota, d.limit, "", "")
		if err != nil {
			return err
		}
		target = &gen
	case pb.Request_DELETE_VIRTUAL_CLUSTER.String():
		gen, err := s.moveVirtualCluster(ctx, tx, actor, team.Department, d.vcID, PhaseDeleting, true, nil, nil, "", "")
		if err != nil {
			return err
		}
		target = &gen
	case pb.Request_CHANGE_VIRTUAL_CLUSTER_VERSION.String():
		gen, err := s.moveVirtualCluster(ctx, tx, actor, team.Department, d.vcID, PhaseProvisioning, true, nil, nil, d.chart, d.kubernetes)
		if err != nil {
			return err
		}
		target = &gen
	case pb.Request_CHANGE_TEAM_QUOTA.String():
		beforeTeam := team.Proto()
		row, err := tx.Exec(ctx, `UPDATE teams SET gpu_centi = $2, cpu_millis = $3, memory_bytes = $4,
			version = version + 1, update_time = now() WHERE id = $1`, team.ID, d.quota.GPU, d.quota.CPUMillis, d.quota.MemoryBytes)
		if err != nil || row.RowsAffected() != 1 {
			return fmt.Errorf("update team quota: %v", err)
		}
		after, err := tenancy.GetTeam(ctx, tx, team.ID, false)
		if err != nil {
			return err
		}
		if err := audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "ChangeTeamQuota", Resource: names.Team(team.ID),
			CorrelationID: s.Tenancy.CorrelationID(ctx), Department: team.Department, Team: team.ID,
			Before: beforeTeam, After: after.Proto()}); err != nil {
			return err
		}
		// The team's parent queue is re-applied through its virtual
		// clusters' reconciles; the database change is the decision.
		if err := workqueue.EnqueueTeam(ctx, tx, team.ID); err != nil {
			return err
		}
		state = StateApplied
	}
	decided := state
	state = StateApproved
	var pol *string
	if policyID != "" {
		pol = &policyID
	}
	row, err := scanRequest(tx.QueryRow(ctx, `
		UPDATE requests SET state = $2, decider = $3, decide_time = now(), decision_reason = $4,
		       approval_policy_id = $5, target_generation = $6, version = version + 1, update_time = now()
		 WHERE id = $1 RETURNING `+requestColumns, r.ID, state, decider, reason, pol, target))
	if err != nil {
		return err
	}
	*r = row
	if decided == StateApplied {
		// Team quota changes take effect with the decision: APPROVED and
		// APPLIED in one transaction, each a legal step of the state machine.
		if row, err = scanRequest(tx.QueryRow(ctx, `UPDATE requests SET state = $2, version = version + 1
			WHERE id = $1 RETURNING `+requestColumns, r.ID, StateApplied)); err != nil {
			return err
		}
		*r = row
	}
	return audit.Record(ctx, tx, audit.Event{
		Actor: actor, Action: "ApproveRequest", Resource: names.Request(r.ID), CorrelationID: s.Tenancy.CorrelationID(ctx),
		Department: r.Department, Team: r.Team, Before: before, After: r.Proto(),
	})
}

// moveVirtualCluster changes phase (and quota, and chart and Kubernetes
// version when not empty), bumps the generation when the desired state
// changed, and enqueues reconcile work. It returns the generation the host
// must reach.
func (s *Service) moveVirtualCluster(ctx context.Context, tx pgx.Tx, actor identity.Principal, dept, id, phase string, bump bool, q, limit *quota.Resources, chart, kubernetes string) (int64, error) {
	vc, err := GetVirtualClusterRow(ctx, tx, id, true)
	if err != nil {
		return 0, err
	}
	if !CanMovePhase(vc.Phase, phase) {
		return 0, errs.FailedPrecondition(errs.ReasonInvalidTransition,
			"virtual cluster %s is %s and cannot move to %s", vc.Name(), vc.Phase, phase)
	}
	before := vc.Proto()
	next := vc
	if q != nil {
		next.Quota = *q
		next.Limit = limit
	}
	var lg, lc, lm *int64
	if next.Limit != nil {
		g, c, m := int64(next.Limit.GPU), next.Limit.CPUMillis, next.Limit.MemoryBytes
		lg, lc, lm = &g, &c, &m
	}
	inc := 0
	if bump {
		inc = 1
	}
	row, err := ScanVirtualCluster(tx.QueryRow(ctx, `
		UPDATE virtual_clusters SET phase = $2, gpu_centi = $3, cpu_millis = $4, memory_bytes = $5,
		       limit_gpu_centi = $6, limit_cpu_millis = $7, limit_memory_bytes = $8,
		       generation = generation + $9, status_message = '', version = version + 1, update_time = now(),
		       chart_version = COALESCE(NULLIF($10, ''), chart_version), kubernetes_version = COALESCE(NULLIF($11, ''), kubernetes_version)
		 WHERE id = $1 RETURNING `+VirtualClusterColumns,
		id, phase, next.Quota.GPU, next.Quota.CPUMillis, next.Quota.MemoryBytes, lg, lc, lm, inc, chart, kubernetes))
	if err != nil {
		return 0, err
	}
	if err := workqueue.Enqueue(ctx, tx, id); err != nil {
		return 0, err
	}
	return row.Generation, audit.Record(ctx, tx, audit.Event{
		Actor: actor, Action: "UpdateVirtualCluster", Resource: vc.Name(), CorrelationID: s.Tenancy.CorrelationID(ctx),
		Department: dept, Team: vc.Team, Before: before, After: row.Proto(),
	})
}

// autoApprove evaluates enabled policies in creation order; the first that
// matches approves the request, provided it fits. A match that does not fit
// leaves the request pending for a person, with the reason in the audit log.
func (s *Requests) autoApprove(ctx context.Context, tx pgx.Tx, r *RequestRow, team tenancy.TeamRow) error {
	rows, err := tx.Query(ctx, `SELECT id, version, expression FROM approval_policies WHERE NOT disabled ORDER BY seq`)
	if err != nil {
		return err
	}
	type pol struct {
		id      string
		version int64
		expr    string
	}
	pols, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (pol, error) {
		var p pol
		return p, cr.Scan(&p.id, &p.version, &p.expr)
	})
	if err != nil || len(pols) == 0 {
		return err
	}
	in, err := s.policyInput(ctx, tx, *r, team)
	if err != nil {
		return err
	}
	for _, p := range pols {
		prg, err := s.program(p.id, p.version, p.expr)
		if err != nil {
			s.log().WarnContext(ctx, "approval policy does not compile; skipped", "policy", p.id, "error", err)
			continue
		}
		ok, err := prg.Eval(ctx, in)
		if err != nil {
			s.log().WarnContext(ctx, "approval policy evaluation failed; treated as no match", "policy", p.id, "error", err)
			continue
		}
		if !ok {
			continue
		}
		actor := audit.SystemActor("policy/" + p.id)
		err = s.approve(ctx, tx, r, actor, "policy:"+p.id, "auto-approved by "+names.ApprovalPolicy(p.id), p.id)
		if err == nil {
			return nil
		}
		if errs.KindOf(err) != errs.KindFailedPrecondition {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{
			Actor: actor, Action: "AutoApprovalSkipped", Resource: names.Request(r.ID), CorrelationID: s.Tenancy.CorrelationID(ctx),
			Department: r.Department, Team: r.Team, After: r.Proto(),
		})
	}
	return nil
}

// policyInput describes a request to CEL.
func (s *Service) policyInput(ctx context.Context, tx pgx.Tx, r RequestRow, team tenancy.TeamRow) (policy.Input, error) {
	d := desiredFromRow(r)
	in := policy.Input{
		Request: policy.Request{Kind: r.Kind, Justification: r.Justification, Requester: r.Requester},
		Team:    policy.Team{Name: team.ID, IsolationTier: team.Tier, GPUQuota: team.Quota.GPU.KAI()},
	}
	var budget quota.Resources
	if err := tx.QueryRow(ctx, `SELECT gpu_centi, cpu_millis, memory_bytes FROM departments WHERE id = $1`, team.Department).
		Scan(&budget.GPU, &budget.CPUMillis, &budget.MemoryBytes); err != nil {
		return in, err
	}
	in.Department = policy.Department{Name: team.Department, GPUBudget: budget.GPU.KAI()}
	var current quota.Resources
	switch d.kind {
	case pb.Request_CHANGE_VIRTUAL_CLUSTER_QUOTA.String(), pb.Request_DELETE_VIRTUAL_CLUSTER.String():
		vc, err := GetVirtualClusterRow(ctx, tx, d.vcID, false)
		if err != nil {
			return in, err
		}
		current = vc.Quota
		in.Request.FractionalGPUs = vc.AllowFractionalGPUs
	case pb.Request_CHANGE_VIRTUAL_CLUSTER_VERSION.String():
		// No resources change: the quantities are the current ones.
		vc, err := GetVirtualClusterRow(ctx, tx, d.vcID, false)
		if err != nil {
			return in, err
		}
		current, d.quota = vc.Quota, vc.Quota
		in.Request.FractionalGPUs = vc.AllowFractionalGPUs
	case pb.Request_CHANGE_TEAM_QUOTA.String():
		current = team.Quota
	case pb.Request_CREATE_VIRTUAL_CLUSTER.String():
		in.Request.FractionalGPUs = d.spec.GetAllowFractionalGpus()
		in.Request.Expires = d.spec.GetExpireTime() != nil
	}
	in.Request.SetQuantities(d.quota, current)
	return in, nil
}

// CheckFit answers "would it fit if approved now?" for a stored request or
// one not yet created.
func (s *Requests) CheckFit(ctx context.Context, req *pb.CheckFitRequest) (*pb.FitResult, error) {
	a, err := s.Tenancy.Access(ctx)
	if err != nil {
		return nil, err
	}
	var team tenancy.TeamRow
	var d desired
	switch {
	case req.GetName() != "":
		r, err := s.readableRequest(ctx, a, req.GetName())
		if err != nil {
			return nil, err
		}
		if team, err = tenancy.GetTeam(ctx, s.Tenancy.Pool, r.Team, false); err != nil {
			return nil, err
		}
		d = desiredFromRow(r)
	case req.GetRequest() != nil:
		if team, _, err = s.Tenancy.ReadableTeam(ctx, "request.team", req.GetRequest().GetTeam()); err != nil {
			return nil, err
		}
		if !a.CanRequest(team.ID, team.Department) {
			return nil, errs.PermissionDenied("only owners of %s (and department admins) ask for it", names.Team(team.ID))
		}
		if d, err = s.validatePayload(ctx, s.Tenancy.Pool, team, req.GetRequest()); err != nil {
			return nil, err
		}
	default:
		return nil, errs.InvalidField("name", "set name (a stored request) or request (a new one)")
	}
	var out fitOutcome
	err = pgx.BeginTxFunc(ctx, s.Tenancy.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		out, err = s.checkFit(ctx, tx, team, d)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out.proto(), nil
}
