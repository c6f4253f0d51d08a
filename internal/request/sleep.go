package request

import (
	"context"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/eventtype"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// canSleep are the phases a virtual cluster may be put to sleep in: it is
// placed and being converged. One being created, deleted or failed cannot.
func canSleep(p virtualcluster.Phase) bool {
	return p == virtualcluster.PhaseReady || p == virtualcluster.PhaseDegraded ||
		p == virtualcluster.PhaseProvisioning || p == virtualcluster.PhaseSleeping
}

// SetSleep puts the virtual cluster to sleep (sleep true) or wakes it,
// in its own transaction: the :sleep and :wake methods (the caller's
// right to do so is checked by the handler) and auto-sleep. etag, when
// set, must match. Putting a sleeping one to sleep, or waking an awake
// one, changes nothing and records nothing.
func (s *Service) SetSleep(ctx context.Context, actor reqctx.Principal, vcID, etag string, sleep bool) (virtualcluster.VirtualCluster, error) {
	return setSleepTx(ctx, s.db, s.fleet, actor, vcID, etag, sleep, nil)
}

// AutoSleep puts a virtual cluster to sleep when it is still idle at now
// (virtualcluster.StillIdle, checked under the locks, so activity that
// raced the worker's look wins); slept reports whether it did.
func AutoSleep(ctx context.Context, db *store.DB, vcID string, now time.Time) (slept bool, err error) {
	_, err = setSleepTx(ctx, db, nil, reqctx.System("auto-sleep"), vcID, "", true, func(ctx context.Context, tx *store.Tx) (bool, error) {
		idle, err := virtualcluster.StillIdle(ctx, tx, vcID, now)
		slept = idle
		return idle, err
	})
	return slept, err
}

// setSleepTx is SetSleep; when onlyIf is set and says no, nothing
// changes.
func setSleepTx(ctx context.Context, db *store.DB, fl *fleet.Service, actor reqctx.Principal, vcID, etag string, sleep bool,
	onlyIf func(ctx context.Context, tx *store.Tx) (bool, error)) (virtualcluster.VirtualCluster, error) {
	var out virtualcluster.VirtualCluster
	err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		vc, err := virtualcluster.Get(ctx, tx, vcID, false)
		if err != nil {
			return err
		}
		team, err := tenancy.GetTeam(ctx, tx, vc.Team, false)
		if err != nil {
			return err
		}
		// The department lock orders this with approvals and fit checks
		// (a wake may have to fit again).
		if _, err := tenancy.LockDepartment(ctx, tx, team.Department); err != nil {
			return err
		}
		if vc, err = virtualcluster.Get(ctx, tx, vcID, true); err != nil {
			return err
		}
		if etag != "" && etag != vc.Etag() {
			return errs.EtagMismatch(vc.Name())
		}
		if onlyIf != nil {
			if ok, err := onlyIf(ctx, tx); err != nil || !ok {
				out = vc
				return err
			}
		}
		out, err = setSleep(ctx, tx, fl, actor, team, vc, sleep)
		return err
	})
	return out, err
}

// setSleep changes a locked virtual cluster's desired sleep state, bumps
// its generation, queues it for the worker and audits the change. A wake
// in a department that frees sleeping virtual clusters' quota must fit
// again (fl places it; nil only for sleeping).
func setSleep(ctx context.Context, tx *store.Tx, fl *fleet.Service, actor reqctx.Principal, team tenancy.Team, vc virtualcluster.VirtualCluster, sleep bool) (virtualcluster.VirtualCluster, error) {
	if vc.Spec.Sleep == sleep {
		return vc, nil
	}
	action, phase := "SleepVirtualCluster", vc.Phase
	if sleep {
		if !canSleep(vc.Phase) {
			return vc, errs.FailedPrecondition(errs.ReasonInvalidTransition,
				"virtual cluster %s is %s; only a PROVISIONING, READY or DEGRADED virtual cluster can be put to sleep", vc.Name(), vc.Phase)
		}
	} else {
		action = "WakeVirtualCluster"
		if err := wakeFits(ctx, tx, fl, team, vc); err != nil {
			return vc, err
		}
		if vc.Phase.CanMoveTo(virtualcluster.PhaseProvisioning) {
			phase = virtualcluster.PhaseProvisioning
		}
	}
	after, err := virtualcluster.SetSleep(ctx, tx, vc.ID, sleep, phase)
	if err != nil {
		return vc, err
	}
	if err := workqueue.Enqueue(ctx, tx, vc.ID); err != nil {
		return vc, err
	}
	// Watchers see it as any other change of the virtual cluster.
	typ := eventtype.VirtualClusterPhaseChanged
	if after.Phase == vc.Phase {
		typ = eventtype.VirtualClusterUpdated
	}
	return after, audit.Record(ctx, tx, audit.Event{
		Actor: actor, Action: action, Resource: vc.Name(),
		Department: team.Department, Team: vc.Team, Before: vc.Snapshot(), After: after.Snapshot(), EventType: typ,
	})
}

// wakeFits: when the department does not keep sleeping virtual clusters'
// quota, waking one takes its quota again, from its team and from its
// node pool on its host cluster.
func wakeFits(ctx context.Context, tx *store.Tx, fl *fleet.Service, team tenancy.Team, vc virtualcluster.VirtualCluster) error {
	dept, err := tenancy.GetDepartment(ctx, tx, team.Department, false)
	if err != nil || dept.SleepingKeepsQuota {
		return err
	}
	node, err := tenancy.TeamNode(ctx, tx, team.ID, team.Quota, vc.ID)
	if err != nil {
		return err
	}
	path := []quota.Node{node}
	if vc.HostCluster != "" && fl != nil {
		hn, ok, err := fl.HostNode(ctx, tx, vc.HostCluster, team.Pool, vc.ID)
		if err != nil {
			return err
		}
		if ok {
			path = append(path, hn)
		}
	}
	if short := quota.CheckFit(path, vc.Spec.Quota); len(short) > 0 {
		err := quota.FitError("name", short)
		if e, ok := errs.As(err); ok {
			e.Kind = errs.KindFailedPrecondition
			e.Message = "department " + team.Department + " does not keep sleeping virtual clusters' quota, and waking " + vc.Name() +
				" does not fit now: " + e.Message
		}
		return err
	}
	return nil
}
