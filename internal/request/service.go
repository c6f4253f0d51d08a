package request

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/eventtype"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/policy"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// lockedRows are what Decide read, under lock, for approving a new
// virtual cluster, so that approve reads nothing more.
type lockedRows struct {
	team  tenancy.Team
	vc    virtualcluster.VirtualCluster
	held  quota.Resources // what the team's other virtual clusters hold
	hosts []fleet.HostCluster
}

// Service decides requests.
type Service struct {
	db       *store.DB
	tenancy  *tenancy.Service
	fleet    *fleet.Service
	versions vclusterversions.Catalog
	log      *slog.Logger
	now      func() time.Time

	mu       sync.Mutex
	programs map[string]compiled // policy id -> program at a version
}

type compiled struct {
	version int64
	prg     *policy.Program
}

// NewService builds the service; now nil is time.Now. ten checks team
// quotas against their node pool; fl places new virtual clusters on host
// clusters; versions are the vCluster chart and Kubernetes versions
// requests may name, with the defaults.
func NewService(db *store.DB, ten *tenancy.Service, fl *fleet.Service, versions vclusterversions.Catalog, log *slog.Logger, now func() time.Time) *Service {
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &Service{db: db, tenancy: ten, fleet: fl, versions: versions, log: log, now: now}
}

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.now() }

func record(ctx context.Context, tx *store.Tx, actor reqctx.Principal, action, resource, requestID string, r Request, before, after any) error {
	return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: action, Resource: resource, RequestID: requestID,
		Department: r.Department, Team: r.Team, Before: before, After: after})
}

// Create stores a validated request of team as PENDING (with its virtual
// cluster in PENDING_APPROVAL for a create) and lets the approval policies
// decide it at once.
func (s *Service) Create(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, team tenancy.Team, justification string, p Payload) (Request, error) {
	return s.CreateAhead(ctx, tx, actor, requestID, team, justification, p, nil)
}

// CreateAhead is Create for a create whose reads Creates may have made (c,
// nil when not run with it).
func (s *Service) CreateAhead(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, team tenancy.Team, justification string, p Payload,
	c *CreateAhead) (Request, error) {
	budget, pols, ok := c.ahead(tx)
	if !ok {
		// Locking the department first keeps one lock order (department
		// -> request -> virtual cluster) everywhere, so approvals never
		// deadlock. The approval policies are read in the same round trip.
		var b store.Batch
		tenancy.QueueLockDepartment(&b, &budget, team.Department)
		queueEnabledPolicies(&b, &pols)
		if err := tx.Send(ctx, &b); err != nil {
			return Request{}, err
		}
	}
	var vc *virtualcluster.VirtualCluster
	if p.Create != nil {
		v, err := virtualcluster.InsertPending(ctx, tx, team.ID, p.Create.VirtualClusterID, p.Create.Spec)
		if err != nil {
			return Request{}, err
		}
		vc = &v
	}
	row, err := insert(ctx, tx, team.ID, team.Department, justification, actor.Subject, p)
	if err != nil {
		return row, err
	}
	if err := record(ctx, tx, actor, "CreateRequest", row.Name(), requestID, row, nil, row.Snapshot()); err != nil {
		return row, err
	}
	if vc != nil {
		// The virtual cluster exists from now on (PENDING_APPROVAL): its own
		// event, so watchers of virtual clusters see it appear.
		if err := audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "CreateVirtualCluster", Resource: vc.Name(),
			Department: team.Department, Team: team.ID, After: vc.Snapshot()}); err != nil {
			return row, err
		}
	}
	if err := s.autoApprove(ctx, tx, &row, team, budget, pols); err != nil {
		return row, err
	}
	return row, nil
}

// Decide runs one decision on the request seen (as read before the
// transaction: its id, department, team and virtual cluster, which never
// change) in a transaction (grouped with the department's other changes,
// tenancy.DepartmentGroup): it locks the department, then the request,
// checks etag and calls apply. When approving a new virtual cluster it
// also reads, in the same round trip and lock order, what the approval
// needs (lockedRows: the team, the virtual cluster, what the team holds,
// the host clusters); a rejection or cancellation needs none of it, nor
// the team's lock. Such approvals that meet in one batch are read ahead
// together (approvalPrefetch).
func (s *Service) Decide(ctx context.Context, seen Request, etag string, approving bool, apply func(ctx context.Context, tx *store.Tx, r *Request) error) (Request, error) {
	var out Request
	creating := approving && seen.Kind == KindCreateVirtualCluster && seen.VirtualCluster != nil
	var ahead *prefetchedApproval
	fn := func(ctx context.Context, tx *store.Tx) error {
		var cur Request
		var l *lockedRows
		if ahead != nil && tx.Prefetched() && ahead.usable() {
			cur, l = ahead.cur, ahead.rows()
		} else {
			var b store.Batch
			var budget quota.Resources
			tenancy.QueueLockDepartment(&b, &budget, seen.Department)
			QueueGet(&b, &cur, seen.ID, true)
			if creating {
				l = &lockedRows{}
				tenancy.QueueGetTeam(&b, &l.team, seen.Team, true)
				virtualcluster.QueueGet(&b, &l.vc, *seen.VirtualCluster, true)
				virtualcluster.QueueQuotaOfTeam(&b, &l.held, seen.Team, *seen.VirtualCluster)
				fleet.QueueAll(&b, &l.hosts)
			}
			if err := tx.Send(ctx, &b); err != nil {
				return err
			}
		}
		if l != nil && cur.Team == seen.Team && cur.vcID() == *seen.VirtualCluster && l.vc.Team == cur.Team {
			cur.locked = l
		}
		if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
			return err
		}
		if err := apply(ctx, tx, &cur); err != nil {
			return err
		}
		if ahead != nil {
			ahead.result = cur
		}
		out = cur
		return nil
	}
	key := tenancy.DepartmentGroup(seen.Department)
	var err error
	if creating {
		ahead = &prefetchedApproval{seen: seen}
		err = s.db.InGroupTxPrefetched(ctx, key, approvalPrefetch, ahead, fn)
	} else {
		err = s.db.InGroupTx(ctx, key, fn)
	}
	return out, err
}

// Approve approves r as a person (decider = actor). platformAdmin: the
// actor may override separation of duties (separationOfDuties).
func (s *Service) Approve(ctx context.Context, tx *store.Tx, r *Request, actor reqctx.Principal, platformAdmin bool, reason string) error {
	action, err := separationOfDuties(ctx, tx, r, actor, platformAdmin, "approve")
	if err != nil {
		return err
	}
	return s.approve(ctx, tx, r, actor, actor.Subject, reason, "", action)
}

// Reject rejects a pending request; platformAdmin as for Approve.
func (s *Service) Reject(ctx context.Context, tx *store.Tx, r *Request, actor reqctx.Principal, platformAdmin bool, reason string) error {
	action, err := separationOfDuties(ctx, tx, r, actor, platformAdmin, "reject")
	if err != nil {
		return err
	}
	return s.close(ctx, tx, r, actor, StateRejected, reason, strings.Replace(action, "Approve", "Reject", 1))
}

// separationOfDuties refuses a decision by the request's requester when
// the department keeps requesters from deciding (requester_cannot_decide,
// the default). A platform admin may still decide their own request: the
// audit action is then ApproveOwnRequest (RejectOwnRequest), so overrides
// are found with one filter. Returns the audit action of an approval.
func separationOfDuties(ctx context.Context, tx *store.Tx, r *Request, actor reqctx.Principal, platformAdmin bool, verb string) (string, error) {
	if r.Requester != actor.Subject {
		return "ApproveRequest", nil
	}
	dept, err := tenancy.GetDepartment(ctx, tx, r.Department, false)
	if err != nil {
		return "", err
	}
	switch {
	case !dept.RequesterCannotDecide:
		return "ApproveRequest", nil
	case platformAdmin:
		return "ApproveOwnRequest", nil
	}
	return "", errs.New(errs.KindPermissionDenied, errs.ReasonRequesterCannotDecide,
		"you asked for %s, so you may not %s it: %s keeps requesters from deciding their own requests "+
			"(separation of duties); another admin of the department or a platform admin must", r.Name(), verb, dept.Name()).
		With("request", r.Name()).With("department", dept.Name())
}

// Cancel cancels a pending request on its requester's behalf.
func (s *Service) Cancel(ctx context.Context, tx *store.Tx, r *Request, actor reqctx.Principal) error {
	return s.close(ctx, tx, r, actor, StateCancelled, "cancelled by the requester", "CancelRequest")
}

// close rejects or cancels a pending request; a virtual cluster waiting for
// it is marked REJECTED.
func (s *Service) close(ctx context.Context, tx *store.Tx, r *Request, actor reqctx.Principal, state State, reason, action string) error {
	if !r.State.CanMoveTo(state) {
		return transitionError(r.Name(), r.State, state)
	}
	before := r.Snapshot()
	row, err := setDecision(ctx, tx, r.ID, state, actor.Subject, reason, nil, nil)
	if err != nil {
		return err
	}
	*r = row
	if err := record(ctx, tx, actor, action, r.Name(), "", *r, before, r.Snapshot()); err != nil {
		return err
	}
	if r.Kind == KindCreateVirtualCluster && r.VirtualCluster != nil {
		vcBefore, err := virtualcluster.Get(ctx, tx, *r.VirtualCluster, true)
		if errs.KindOf(err) == errs.KindNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		vc, changed, err := virtualcluster.RejectPending(ctx, tx, vcBefore.ID, "request "+strings.ToLower(string(state))+": "+reason)
		if err != nil || !changed {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "VirtualClusterPhase" + vc.Phase.Word(), Resource: vc.Name(),
			Department: r.Department, Team: r.Team, Before: vcBefore.Snapshot(), After: vc.Snapshot()})
	}
	return nil
}

// approve moves a pending request to APPROVED and makes its change in the
// database, enqueueing host-cluster work in the same transaction. The caller
// holds the department lock and the request row lock.
func (s *Service) approve(ctx context.Context, tx *store.Tx, r *Request, actor reqctx.Principal, decider, reason, policyID, action string) error {
	if !r.State.CanMoveTo(StateApproved) {
		return transitionError(r.Name(), r.State, StateApproved)
	}
	l := r.locked
	var team tenancy.Team
	var err error
	if l != nil {
		team = l.team
	} else if team, err = tenancy.GetTeam(ctx, tx, r.Team, true); err != nil {
		return err
	}
	if c := r.Payload.Create; c != nil && c.Spec.ExpireTime != nil && !c.Spec.ExpireTime.After(s.now()) {
		return errs.FailedPrecondition(errs.ReasonInvalidTransition,
			"%s asks for a virtual cluster whose expire_time (%s) has already passed; reject it or ask again",
			r.Name(), c.Spec.ExpireTime.Format(time.RFC3339))
	}
	fit, err := s.checkFit(ctx, tx, team, r.Payload, r.vcID(), l)
	if err != nil {
		return err
	}
	if !fit.Fits() {
		return fit.Err()
	}
	before := r.Snapshot()
	var target *int64
	applied := false
	want, limit, _ := r.Payload.wanted()
	switch r.Kind {
	case KindCreateVirtualCluster:
		if fit.HostCluster == "" {
			return errs.New(errs.KindUnknown, errs.ReasonInternal, "%s fits but was placed on no host cluster", r.Name())
		}
		if l != nil {
			target, err = s.placeAndProvision(ctx, tx, actor, team.Department, l.vc, fit.HostCluster)
			break
		}
		if err := virtualcluster.PlaceOn(ctx, tx, r.vcID(), fit.HostCluster); err != nil {
			return err
		}
		target, err = s.moveVirtualCluster(ctx, tx, actor, team.Department, r.vcID(), virtualcluster.PhaseProvisioning, false, nil, nil, nil)
	case KindChangeVirtualClusterQuota:
		target, err = s.moveVirtualCluster(ctx, tx, actor, team.Department, r.vcID(), virtualcluster.PhaseProvisioning, true, &want, limit, nil)
	case KindDeleteVirtualCluster:
		target, err = s.moveVirtualCluster(ctx, tx, actor, team.Department, r.vcID(), virtualcluster.PhaseDeleting, true, nil, nil, nil)
	case KindChangeVirtualClusterVersion:
		target, err = s.moveVirtualCluster(ctx, tx, actor, team.Department, r.vcID(), virtualcluster.PhaseProvisioning, true, nil, nil,
			&virtualcluster.Versions{Chart: r.Payload.ChangeVersion.ChartVersion, Kubernetes: r.Payload.ChangeVersion.KubernetesVersion})
	case KindChangeTeamQuota:
		err = tenancy.SetTeamQuota(ctx, tx, actor, team, want)
		applied = true
	case KindSleepVirtualCluster, KindWakeVirtualCluster:
		var vc, after virtualcluster.VirtualCluster
		if vc, err = virtualcluster.Get(ctx, tx, r.vcID(), true); err != nil {
			return err
		}
		if after, err = setSleep(ctx, tx, s.fleet, actor, team, vc, r.Kind == KindSleepVirtualCluster); err != nil {
			return err
		}
		// Already asleep (or awake): nothing for the worker to do.
		applied = after.Generation == vc.Generation
		if !applied {
			target = &after.Generation
		}
	}
	if err != nil {
		return err
	}
	var pol *string
	if policyID != "" {
		pol = &policyID
	}
	*r = setDecisionDeferred(tx, *r, StateApproved, decider, reason, pol, target)
	if !applied {
		return record(ctx, tx, actor, action, r.Name(), "", *r, before, r.Snapshot())
	}
	// Team quota changes take effect with the decision: APPROVED and
	// APPLIED in one transaction, each a legal step of the state machine
	// with its own event.
	approved := r.Snapshot()
	if err := record(ctx, tx, actor, action, r.Name(), "", *r, before, approved); err != nil {
		return err
	}
	row, err := setState(ctx, tx, r.ID, StateApplied)
	if err != nil {
		return err
	}
	*r = row
	return record(ctx, tx, actor, "Request"+StateApplied.Word(), r.Name(), "", *r, approved, r.Snapshot())
}

// placeAndProvision is moveVirtualCluster to PROVISIONING on host cluster
// host for a new virtual cluster vc that Decide read and locked: the write
// is deferred, nothing is read.
func (s *Service) placeAndProvision(ctx context.Context, tx *store.Tx, actor reqctx.Principal, dept string, vc virtualcluster.VirtualCluster, host string) (*int64, error) {
	if !vc.Phase.CanMoveTo(virtualcluster.PhaseProvisioning) {
		return nil, errs.FailedPrecondition(errs.ReasonInvalidTransition,
			"virtual cluster %s is %s and cannot move to %s", vc.Name(), vc.Phase, virtualcluster.PhaseProvisioning)
	}
	row := virtualcluster.MoveDeferred(tx, vc, virtualcluster.PhaseProvisioning, vc.Spec.Quota, vc.Spec.Limit,
		virtualcluster.Versions{Chart: vc.Spec.ChartVersion, Kubernetes: vc.Spec.KubernetesVersion}, false, host)
	if err := workqueue.Enqueue(ctx, tx, vc.ID); err != nil {
		return nil, err
	}
	gen := row.Generation
	return &gen, audit.Record(ctx, tx, audit.Event{
		Actor: actor, Action: "UpdateVirtualCluster", Resource: vc.Name(),
		Department: dept, Team: vc.Team, Before: vc.Snapshot(), After: row.Snapshot(), EventType: eventtype.VirtualClusterPhaseChanged,
	})
}

// moveVirtualCluster changes phase (and quota, and the chart and
// Kubernetes versions when given), bumps the generation when the desired
// state changed, and enqueues reconcile work. It returns the generation the
// host must reach.
func (s *Service) moveVirtualCluster(ctx context.Context, tx *store.Tx, actor reqctx.Principal, dept, id string, phase virtualcluster.Phase, bump bool, q, limit *quota.Resources, versions *virtualcluster.Versions) (*int64, error) {
	vc, err := virtualcluster.Get(ctx, tx, id, true)
	if err != nil {
		return nil, err
	}
	if !vc.Phase.CanMoveTo(phase) {
		return nil, errs.FailedPrecondition(errs.ReasonInvalidTransition,
			"virtual cluster %s is %s and cannot move to %s", vc.Name(), vc.Phase, phase)
	}
	nextQuota, nextLimit := vc.Spec.Quota, vc.Spec.Limit
	if q != nil {
		nextQuota, nextLimit = *q, limit
	}
	nextVersions := virtualcluster.Versions{Chart: vc.Spec.ChartVersion, Kubernetes: vc.Spec.KubernetesVersion}
	if versions != nil {
		nextVersions = *versions
	}
	row, err := virtualcluster.Move(ctx, tx, id, phase, nextQuota, nextLimit, nextVersions, bump)
	if err != nil {
		return nil, err
	}
	if err := workqueue.Enqueue(ctx, tx, id); err != nil {
		return nil, err
	}
	gen := row.Generation
	typ := eventtype.VirtualClusterPhaseChanged
	if row.Phase == vc.Phase {
		typ = eventtype.VirtualClusterUpdated
	}
	return &gen, audit.Record(ctx, tx, audit.Event{
		Actor: actor, Action: "UpdateVirtualCluster", Resource: vc.Name(),
		Department: dept, Team: vc.Team, Before: vc.Snapshot(), After: row.Snapshot(), EventType: typ,
	})
}

// autoApprove evaluates enabled policies in creation order; the first that
// matches approves the request, provided it fits. A match that does not fit
// leaves the request pending for a person, with the reason in the audit log.
// pols are the enabled policies, as Create read them.
func (s *Service) autoApprove(ctx context.Context, tx *store.Tx, r *Request, team tenancy.Team, budget quota.Resources, pols []Policy) error {
	if len(pols) == 0 {
		return nil
	}
	in, err := s.policyInput(ctx, tx, *r, team, budget)
	if err != nil {
		return err
	}
	for _, p := range pols {
		prg, err := s.program(p.ID, p.Version, p.Expression)
		if err != nil {
			s.log.WarnContext(ctx, "approval policy does not compile; skipped", "policy", p.ID, "error", err)
			continue
		}
		ok, err := prg.Eval(ctx, in)
		if err != nil {
			s.log.WarnContext(ctx, "approval policy evaluation failed; treated as no match", "policy", p.ID, "error", err)
			continue
		}
		if !ok {
			continue
		}
		actor := reqctx.System("policy/" + p.ID)
		err = s.approve(ctx, tx, r, actor, "policy:"+p.ID, "auto-approved by "+names.ApprovalPolicy(p.ID), p.ID, "ApproveRequest")
		if err == nil {
			return nil
		}
		if errs.KindOf(err) != errs.KindFailedPrecondition {
			return err
		}
		return record(ctx, tx, actor, "AutoApprovalSkipped", r.Name(), "", *r, nil, r.Snapshot())
	}
	return nil
}

// program compiles a policy once per version. The expression is compared
// too: a policy deleted and created again under the same id starts over at
// version 1 with a different expression.
func (s *Service) program(id string, version int64, expr string) (*policy.Program, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.programs[id]; ok && c.version == version && c.prg.Expression() == expr {
		return c.prg, nil
	}
	prg, err := policy.Compile(expr)
	if err != nil {
		return nil, err
	}
	if s.programs == nil {
		s.programs = map[string]compiled{}
	}
	s.programs[id] = compiled{version: version, prg: prg}
	return prg, nil
}

// policyInput describes a request to CEL; budget is its department's (as
// read under the department lock).
func (s *Service) policyInput(ctx context.Context, q store.Querier, r Request, team tenancy.Team, budget quota.Resources) (policy.Input, error) {
	in := policy.Input{
		Request: policy.Request{Kind: string(r.Kind), Justification: r.Justification, Requester: r.Requester},
		Team:    policy.Team{Name: team.ID, IsolationTier: string(team.Tier), GPUQuota: team.Quota.GPU.KAI()},
	}
	in.Department = policy.Department{Name: team.Department, GPUBudget: budget.GPU.KAI()}
	var current quota.Resources
	switch r.Kind {
	case KindChangeVirtualClusterQuota, KindDeleteVirtualCluster, KindChangeVirtualClusterVersion, KindSleepVirtualCluster, KindWakeVirtualCluster:
		vc, err := virtualcluster.Get(ctx, q, r.vcID(), false)
		if err != nil {
			return in, err
		}
		current = vc.Spec.Quota
		in.Request.FractionalGPUs = vc.Spec.AllowFractionalGPUs
	case KindChangeTeamQuota:
		current = team.Quota
	case KindCreateVirtualCluster:
		in.Request.FractionalGPUs = r.Payload.Create.Spec.AllowFractionalGPUs
		in.Request.Expires = r.Payload.Create.Spec.ExpireTime != nil
	}
	want, _, _ := r.Payload.wanted()
	if r.Kind == KindChangeVirtualClusterVersion || r.Kind == KindSleepVirtualCluster || r.Kind == KindWakeVirtualCluster {
		want = current // no quantities change
	}
	in.Request.SetQuantities(want, current)
	return in, nil
}

// Settle moves the APPROVED requests carried by generations up to gen of
// virtual cluster vc (of team in dept) to APPLIED or FAILED, with an audit
// event each (the worker, once the host reflects gen or gave up).
func Settle(ctx context.Context, tx *store.Tx, actor reqctx.Principal, vc, dept, team string, gen int64, state State, failure string) error {
	rows, err := settle(ctx, tx, vc, gen, state, failure)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "Request" + state.Word(), Resource: r.Name(),
			Department: dept, Team: team, After: r.Snapshot()}); err != nil {
			return err
		}
	}
	return nil
}

// ExpireVirtualClusters creates an approved delete request for every live
// virtual cluster whose expire_time has passed, one transaction each. Safe
// to run from several replicas: the phase moves to DELETING under the
// department and row locks, so each is expired once. Returns how many.
func (s *Service) ExpireVirtualClusters(ctx context.Context) (int, error) {
	actor := reqctx.System("expiry")
	n := 0
	for {
		done := false
		err := s.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
			id, teamID, found, err := virtualcluster.NextExpired(ctx, tx, s.now())
			if err != nil || !found {
				done = !found
				return err
			}
			team, err := tenancy.GetTeam(ctx, tx, teamID, false)
			if err != nil {
				return err
			}
			// Lock order as everywhere else: department, then the virtual
			// cluster. Another replica may have expired it meanwhile.
			if _, err := tenancy.LockDepartment(ctx, tx, team.Department); err != nil {
				return err
			}
			vc, err := virtualcluster.Get(ctx, tx, id, true)
			if err != nil {
				return err
			}
			if !vc.Phase.IsLive() {
				return nil
			}
			// A pending request on this virtual cluster is superseded; it is
			// cancelled like any other, audit event included.
			pending, err := pendingFor(ctx, tx, id)
			if err != nil {
				return err
			}
			for i := range pending {
				if err := s.close(ctx, tx, &pending[i], actor, StateCancelled, "virtual cluster expired", "CancelRequest"); err != nil {
					return err
				}
			}
			row, err := insert(ctx, tx, team.ID, team.Department, "expire_time passed", actor.Subject,
				Payload{Delete: &DeletePayload{VirtualCluster: names.VirtualCluster(team.ID, id)}})
			if err != nil {
				return err
			}
			if err := record(ctx, tx, actor, "CreateRequest", row.Name(), "", row, nil, row.Snapshot()); err != nil {
				return err
			}
			return s.approve(ctx, tx, &row, actor, actor.Subject, "virtual cluster expired", "", "ApproveRequest")
		})
		if err == nil && !done {
			n++ // counted once committed: InTx may run the callback again
		}
		if err != nil || done {
			return n, err
		}
	}
}
