package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
	vcs "github.com/gpuplane/gpuplane/internal/virtualcluster"
)

var actor = reqctx.System("worker")

// Condition types, one per thing that must hold for READY.
const (
	CondNamespace     = "NamespaceReady"
	CondQueues        = "QueuesReady"
	CondGuardrails    = "GuardrailsReady"
	CondNetworkPolicy = "NetworkPolicyReady"
	CondRelease       = "ReleaseDeployed"
	CondControlPlane  = "ControlPlaneReady"
	CondKubeconfig    = "KubeconfigReady"
	// CondEndpoint: the member-facing address of the virtual API server is
	// known (a LoadBalancer's address is assigned by the cloud).
	CondEndpoint = "EndpointReady"
	// CondTenantAccess: the team's RBAC inside the virtual cluster follows
	// the member list (true where no OIDC makes it moot).
	CondTenantAccess = "TenantAccessReady"
	// CondFractionalGPUs, on virtual clusters created with fractional GPUs:
	// false while their vCluster chart cannot keep shared GPUs working, so
	// the guardrails refuse them (hostcluster.FractionalGPUsNotice says how
	// to get them back). Advisory: it does not hold READY back.
	CondFractionalGPUs = "FractionalGPUsAvailable"
)

func (w *Worker) step(name string) {
	if w.beforeStep != nil {
		w.beforeStep(name)
	}
}

// process runs one claimed reconcile to its outcome.
func (w *Worker) process(ctx context.Context, c claim) {
	ctx, job := w.tel.startJob(ctx, c)
	log := w.Log.With("virtual_cluster", c.VirtualCluster, "attempt", c.Attempts)
	start := time.Now()
	stopRenewing := w.renewLease(ctx, c)
	err := w.reconcile(ctx, &c)
	stopRenewing()
	defer job.end(ctx, w.outcome(ctx, c, err), err)
	if ctx.Err() != nil {
		// Shutting down (or killed in a test): the lease is released by Run,
		// or expires; the next worker starts this reconcile over.
		return
	}
	if err != nil {
		log.Warn("reconcile failed", "error", err, "duration", time.Since(start))
		if ferr := w.fail(ctx, c, err); ferr != nil {
			log.Error("recording reconcile failure failed", "error", ferr)
		}
		return
	}
	log.Debug("reconciled", "duration", time.Since(start))
}

func (w *Worker) reconcile(ctx context.Context, cp *claim) error {
	w.step("load")
	c := *cp
	d, err := load(ctx, w.DB, c.VirtualCluster)
	if errs.KindOf(err) == errs.KindNotFound {
		return w.done(ctx, c)
	}
	if err != nil {
		return err
	}
	cp.generation = d.vc.Generation
	if !d.vc.Phase.NeedsResync() && d.vc.Phase != vcs.PhaseDeleting {
		// PENDING_APPROVAL, REJECTED, DELETED, FAILED: nothing to converge.
		return w.done(ctx, c)
	}
	if knownDown(d.cluster) {
		// The observer saw its host cluster down: say so and wait, without
		// a call that would only time out.
		return w.hostDown(ctx, c, d, nil)
	}
	host, err := w.hostFor(ctx, d.cluster)
	if err != nil {
		if hostClusterDown(err) {
			return w.hostDown(ctx, c, d, err)
		}
		return err
	}
	err = w.converge(ctx, c, d, host)
	if err != nil && hostClusterDown(err) && ctx.Err() == nil {
		return w.hostDown(ctx, c, d, err)
	}
	return err
}

// converge makes the virtual cluster's host cluster match its desired
// state (or deletes it there) and records the outcome.
func (w *Worker) converge(ctx context.Context, c claim, d desiredState, host Host) error {
	if d.vc.Phase == vcs.PhaseDeleting {
		w.step("delete")
		if err := host.Delete(ctx, d.host); err != nil {
			var pending *hostcluster.DeletePendingError
			if !errors.As(err, &pending) {
				return err
			}
			// Parent queues wait for KAI to drop the deleted child from
			// their status: not a failure, look again soon.
			w.Log.Info("delete waits for KAI", "virtual_cluster", d.vc.ID, "waiting", pending.Waiting)
			markRequeued(ctx)
			return w.later(ctx, c, w.cfg.Poll, nil)
		}
		w.step("record-deleted")
		if err := w.finishDelete(ctx, d); err != nil {
			return err
		}
		return w.done(ctx, c)
	}

	var drift []string
	var obs hostcluster.Observed
	unchanged := false
	// The host already reflects this generation: a resync, or another look
	// at a virtual cluster whose control plane is starting. What the host
	// shows may make Apply unnecessary (unchanged).
	if d.vc.ObservedGeneration == d.vc.Generation {
		w.step("observe-before")
		before, err := host.Observe(ctx, d.host)
		if err != nil {
			return err
		}
		// Drift is a difference from a state the host already reached; a
		// new generation (a resize, sleep or wake) is a change, not drift,
		// and neither is anything missing before provisioning finished.
		if d.vc.Phase != vcs.PhaseProvisioning {
			drift = describeDrift(before)
		}
		if unchanged, err = w.unchanged(ctx, host, d, before); err != nil {
			return err
		}
		obs = before
	}
	if !unchanged {
		w.step("apply")
		steps, applyErr := host.Apply(ctx, d.host)
		if applyErr != nil && hostClusterDown(applyErr) {
			return applyErr // not this virtual cluster's failure: no step is to blame
		}
		if applyErr != nil {
			// Record which step broke, then let fail() decide retry vs FAILED.
			_ = w.writeStatus(ctx, d, conditionsFromSteps(d.vc.Conditions, steps, d.vc.Generation), "", nil, nil)
			return applyErr
		}
		w.step("observe")
		var err error
		if obs, err = host.Observe(ctx, d.host); err != nil {
			return err
		}
	}
	if d.host.Sleep {
		return w.recordSleep(ctx, c, d, obs, drift)
	}
	conds := conditions(d.vc.Conditions, obs, d.host, d.vc.Generation)
	conds = append(conds, setCondition(d.vc.Conditions, CondHostCluster, true, "Connected", describeHost(d.cluster), d.vc.Generation))
	phase := vcs.PhaseProvisioning
	msg := "waiting for: " + strings.Join(notReady(conds), ", ")
	stuck := notReadySince(conds, time.Now().Add(-w.cfg.ProvisioningDeadline))
	switch {
	case obs.Ready():
		phase, msg = vcs.PhaseReady, d.host.FractionalGPUsNotice()
	case len(stuck) > 0:
		// Past the deadline PROVISIONING would hide a control plane that
		// never starts: DEGRADED says so, and the worker keeps looking.
		phase = vcs.PhaseDegraded
		msg = fmt.Sprintf("degraded: %s not ready for longer than the provisioning deadline (%s)", strings.Join(stuck, ", "), w.cfg.ProvisioningDeadline)
		if d.vc.Phase == vcs.PhaseProvisioning {
			w.tel.m.deadlines.Inc()
			w.Log.Warn("provisioning deadline passed", "virtual_cluster", d.vc.ID, "not_ready", stuck, "deadline", w.cfg.ProvisioningDeadline)
		}
	case d.vc.Phase != vcs.PhaseProvisioning && d.vc.ObservedGeneration == d.vc.Generation:
		phase = vcs.PhaseDegraded
		msg = "degraded: " + strings.Join(notReady(conds), ", ") + " not ready"
	}
	return w.recordOutcome(ctx, c, d, conds, phase, msg, obs, drift, phase == vcs.PhaseReady)
}

// unchangedChecker is implemented by hosts that can tell, from an
// observation, that Apply would write nothing (hostcluster.Client.Unchanged).
type unchangedChecker interface {
	Unchanged(ctx context.Context, vc hostcluster.VirtualCluster, o hostcluster.Observed) (bool, error)
}

// unchanged reports whether a reconcile may skip Apply (and the second
// Observe): the observation shows nothing Apply would act on (no drift,
// the team's access in sync, no workload pod left on a sleeping one), and
// the host confirms that every object it applied is exactly as its last
// Apply of this same desired state left it. That turns the resync of an
// untouched virtual cluster, and each look at one whose control plane is
// still starting, into reads only. Anything else takes the full path,
// which repairs what it finds.
func (w *Worker) unchanged(ctx context.Context, host Host, d desiredState, before hostcluster.Observed) (bool, error) {
	u, ok := host.(unchangedChecker)
	if !ok || len(describeDrift(before)) > 0 || !before.TenantAccessInSync() || (d.host.Sleep && before.WorkloadPods > 0) {
		return false, nil
	}
	return u.Unchanged(ctx, d.host, before)
}

// recordOutcome stores what a reconcile saw, audits repaired drift, and
// finishes the work item when the host reached the desired state (done);
// otherwise (the control plane or kubeconfig is not there yet, or not
// asleep yet) it looks again soon without counting a failure.
func (w *Worker) recordOutcome(ctx context.Context, c claim, d desiredState, conds []vcs.Condition, phase vcs.Phase, msg string,
	obs hostcluster.Observed, drift []string, done bool) error {
	w.step("record-status")
	if !statusUnchanged(d.vc, conds, phase, msg, obs) {
		if err := w.writeStatus(ctx, d, conds, phase, &msg, &obs); err != nil {
			return err
		}
	}
	if len(drift) > 0 {
		w.Log.Info("repaired drift on the host cluster", "virtual_cluster", d.vc.ID, "drift", drift)
		if err := w.auditDrift(ctx, d, drift); err != nil {
			return err
		}
	}
	if done {
		return w.done(ctx, c)
	}
	markRequeued(ctx)
	return w.later(ctx, c, w.cfg.Poll, nil)
}

// writeStatus stores conditions (and phase/message/observation when set)
// and, once the host reflects generation G, marks requests that targeted
// G or earlier as APPLIED.
func (w *Worker) writeStatus(ctx context.Context, d desiredState, conds []vcs.Condition, phase vcs.Phase, msg *string, obs *hostcluster.Observed) error {
	return w.DB.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		cur, err := vcs.Get(ctx, tx, d.vc.ID, true)
		if err != nil {
			return err
		}
		if cur.Phase == vcs.PhaseDeleting || cur.Phase == vcs.PhaseDeleted {
			return nil // a delete overtook us; its reconcile owns the status now
		}
		st := nextStatus(cur, d.vc.Generation, conds, phase, msg, obs)
		after, err := vcs.WriteStatus(ctx, tx, cur.ID, st)
		if err != nil {
			return err
		}
		if st.ObservedGeneration == d.vc.Generation {
			if err := request.Settle(ctx, tx, actor, d.vc.ID, d.team.Department, d.team.ID, st.ObservedGeneration, request.StateApplied, ""); err != nil {
				return err
			}
		}
		if st.Phase != cur.Phase {
			return w.record(ctx, tx, d, "VirtualClusterPhase"+st.Phase.Word(), cur.Name(), cur.Snapshot(), after.Snapshot())
		}
		if statusChanged(cur, after) {
			// Conditions, endpoint, message or allocation: watchers and
			// webhooks see progress within a phase (PROVISIONING's steps).
			return w.record(ctx, tx, d, "VirtualClusterStatusChanged", cur.Name(), cur.Snapshot(), after.Snapshot())
		}
		return nil
	})
}

// nextStatus is the status writeStatus stores for cur, reconciled at
// generation gen: conditions always; phase and observed generation when
// phase is set and cur is still at gen; message and observation when given.
func nextStatus(cur vcs.VirtualCluster, gen int64, conds []vcs.Condition, phase vcs.Phase, msg *string, obs *hostcluster.Observed) vcs.Status {
	st := vcs.Status{Phase: cur.Phase, Conditions: conds, ObservedGeneration: cur.ObservedGeneration,
		Message: cur.StatusMessage, Allocated: cur.Allocated, Endpoint: cur.Endpoint}
	if phase != "" && cur.Generation == gen && cur.Phase.CanMoveTo(phase) {
		st.Phase = phase
	}
	if phase != "" && cur.Generation == gen {
		st.ObservedGeneration = gen
	}
	if msg != nil {
		st.Message = *msg
	}
	st.Message = truncate(st.Message, 2000)
	if obs != nil {
		if obs.Allocated != nil {
			st.Allocated = quota.Resources{GPU: quota.GPU(obs.Allocated.GPUCenti), CPUMillis: obs.Allocated.CPUMillis, MemoryBytes: obs.Allocated.MemoryBytes}
		}
		st.Endpoint = obs.Endpoint
	}
	return st
}

// statusUnchanged reports whether writeStatus would leave the virtual
// cluster as it was loaded: same phase at an already observed generation,
// same conditions, message, allocation and endpoint (the common outcome of
// a resync). Its transaction is then skipped: requests up to that
// generation were settled when it was first observed, and there is no
// change to record. A row changed since it was loaded is no reason to
// write either: whoever changed it queued a reconcile of its own.
func statusUnchanged(cur vcs.VirtualCluster, conds []vcs.Condition, phase vcs.Phase, msg string, obs hostcluster.Observed) bool {
	if phase == "" || phase != cur.Phase || cur.ObservedGeneration != cur.Generation {
		return false
	}
	next := nextStatus(cur, cur.Generation, conds, phase, &msg, &obs)
	if next.Message != cur.StatusMessage || next.Endpoint != cur.Endpoint || next.Allocated != cur.Allocated ||
		len(next.Conditions) != len(cur.Conditions) {
		return false
	}
	for i, c := range next.Conditions {
		p := cur.Conditions[i]
		if c.Type != p.Type || c.Status != p.Status || c.Reason != p.Reason || c.Message != p.Message ||
			c.ObservedGeneration != p.ObservedGeneration || !c.LastTransitionTime.Equal(p.LastTransitionTime) {
			return false
		}
	}
	return true
}

// statusChanged compares the status as the API renders it.
func statusChanged(before, after vcs.VirtualCluster) bool {
	b, berr := json.Marshal(before.Snapshot().Status)
	a, aerr := json.Marshal(after.Snapshot().Status)
	return berr != nil || aerr != nil || !bytes.Equal(a, b)
}

// record writes one of the worker's audit events.
func (w *Worker) record(ctx context.Context, tx *store.Tx, d desiredState, action, resource string, before, after any) error {
	return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: action, Resource: resource,
		Department: d.team.Department, Team: d.team.ID, Before: before, After: after})
}

func (w *Worker) finishDelete(ctx context.Context, d desiredState) error {
	return w.DB.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		cur, err := vcs.Get(ctx, tx, d.vc.ID, true)
		if err != nil || cur.Phase != vcs.PhaseDeleting {
			return err
		}
		after, err := vcs.MarkDeleted(ctx, tx, cur.ID)
		if err != nil {
			return err
		}
		if err := enqueueSiblingsOnHost(ctx, tx, d); err != nil {
			return err
		}
		if err := request.Settle(ctx, tx, actor, d.vc.ID, d.team.Department, d.team.ID, cur.Generation, request.StateApplied, ""); err != nil {
			return err
		}
		return w.record(ctx, tx, d, "VirtualClusterDeleted", cur.Name(), cur.Snapshot(), after.Snapshot())
	})
}

// fail records a failed attempt: retried with backoff, or FAILED (with the
// requests it carried) once attempts run out or the error is permanent.
func (w *Worker) fail(ctx context.Context, c claim, cause error) error {
	if hostClusterDown(cause) && !permanent(cause) {
		// Never FAILED for it: an outage ends, and what was asked for is as
		// valid as before. reconcile sends these to hostDown itself; this is
		// for one that surfaced elsewhere.
		d, err := load(ctx, w.DB, c.VirtualCluster)
		if err != nil {
			return err
		}
		return w.hostDown(ctx, c, d, cause)
	}
	if c.Attempts < w.cfg.MaxAttempts && !permanent(cause) {
		return w.later(ctx, c, w.backoff(c.Attempts), cause)
	}
	d, err := load(ctx, w.DB, c.VirtualCluster)
	if err != nil {
		return err
	}
	attempted := c.generation
	if attempted == 0 { // failed before the virtual cluster was read
		attempted = d.vc.Generation
	}
	msg := oneLine(truncate(cause.Error(), 2000))
	if !permanent(cause) {
		msg = fmt.Sprintf("gave up after %d attempts: %s", c.Attempts, msg)
	}
	err = w.DB.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		cur, err := vcs.Get(ctx, tx, d.vc.ID, true)
		if err != nil {
			return err
		}
		if cur.Generation != attempted {
			return nil // a newer desired state arrived; it gets its own attempts
		}
		if cur.ObservedGeneration == cur.Generation && cur.Phase.CanMoveTo(vcs.PhaseDegraded) {
			// The host already reflects this generation, so no change failed:
			// the host cluster did (a resync or a readiness check). READY may
			// not become FAILED (Phase.CanMoveTo) and FAILED is never
			// resynced; DEGRADED is, so the next resync tries again.
			msg := fmt.Sprintf("degraded: %s (%d attempts; retried at the next resync)", oneLine(truncate(cause.Error(), 2000)), c.Attempts)
			after, err := vcs.SetPhase(ctx, tx, cur.ID, vcs.PhaseDegraded, msg)
			if err != nil || cur.Phase == vcs.PhaseDegraded {
				return err
			}
			return w.record(ctx, tx, d, "VirtualClusterPhase"+vcs.PhaseDegraded.Word(), cur.Name(), cur.Snapshot(), after.Snapshot())
		}
		after, err := vcs.SetPhase(ctx, tx, cur.ID, vcs.PhaseFailed, msg)
		if err != nil {
			return err
		}
		if err := request.Settle(ctx, tx, actor, d.vc.ID, d.team.Department, d.team.ID, cur.Generation, request.StateFailed, truncate(msg, 2000)); err != nil {
			return err
		}
		return w.record(ctx, tx, d, "VirtualClusterFailed", cur.Name(), cur.Snapshot(), after.Snapshot())
	})
	if err != nil {
		return err
	}
	return w.done(ctx, c)
}

func (w *Worker) auditDrift(ctx context.Context, d desiredState, drift []string) error {
	return w.DB.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		cur, err := vcs.Get(ctx, tx, d.vc.ID, false)
		if err != nil {
			return err
		}
		return w.record(ctx, tx, d, "RepairDrift", cur.Name(), nil, cur.Snapshot().WithMessage("repaired drift: "+strings.Join(drift, "; ")))
	})
}

func describeDrift(o hostcluster.Observed) []string {
	var out []string
	if !o.NamespaceExists {
		out = append(out, "namespace missing")
	}
	for _, q := range o.Queues {
		switch {
		case !q.Exists:
			out = append(out, "queue "+q.Name+" missing")
		case len(q.Drift) > 0:
			out = append(out, "queue "+q.Name+": "+strings.Join(q.Drift, ", "))
		}
	}
	if !o.GuardrailsPresent {
		out = append(out, "admission guardrails missing")
	}
	if !o.NetworkPolicyPresent {
		out = append(out, "network policy missing")
	}
	if o.Release != nil && !o.ReleaseUpToDate {
		out = append(out, "release values changed")
	}
	if tenantAccessReason(o.TenantAccess) == "Drifted" {
		out = append(out, "team RBAC inside the virtual cluster: "+o.TenantAccess.Detail)
	}
	return out
}

// setCondition keeps last_transition_time when the status did not change.
func setCondition(prev []vcs.Condition, typ string, ok bool, reason, message string, gen int64) vcs.Condition {
	st := vcs.ConditionFalse
	if ok {
		st = vcs.ConditionTrue
	}
	c := vcs.Condition{Type: typ, Status: st, Reason: reason, Message: message, ObservedGeneration: gen, LastTransitionTime: time.Now()}
	for _, p := range prev {
		if p.Type == typ && p.Status == st {
			c.LastTransitionTime = p.LastTransitionTime
		}
	}
	return c
}

func conditions(prev []vcs.Condition, o hostcluster.Observed, vc hostcluster.VirtualCluster, gen int64) []vcs.Condition {
	why := func(ok bool, yes, no string) string {
		if ok {
			return yes
		}
		return no
	}
	out := []vcs.Condition{
		setCondition(prev, CondNamespace, o.NamespaceExists, why(o.NamespaceExists, "Exists", "Missing"), "", gen),
		setCondition(prev, CondQueues, o.QueuesInSync(), why(o.QueuesInSync(), "InSync", "Drifted"), "", gen),
		setCondition(prev, CondGuardrails, o.GuardrailsPresent, why(o.GuardrailsPresent, "Present", "Missing"), strings.Join(o.GuardrailWarnings, "; "), gen),
		setCondition(prev, CondNetworkPolicy, o.NetworkPolicyPresent, why(o.NetworkPolicyPresent, "Present", "Missing"), "", gen),
		setCondition(prev, CondRelease, o.ReleaseDeployed(), why(o.ReleaseDeployed(), "Deployed", "NotDeployed"), releaseMessage(o), gen),
		setCondition(prev, CondControlPlane, o.ControlPlaneReady, why(o.ControlPlaneReady, "Ready", "Starting"), "", gen),
		setCondition(prev, CondKubeconfig, o.KubeconfigSecretPresent, why(o.KubeconfigSecretPresent, "Present", "Waiting"), "", gen),
		setCondition(prev, CondEndpoint, o.Endpoint != "", why(o.Endpoint != "", "Known", "Waiting"), o.Endpoint, gen),
		setCondition(prev, CondTenantAccess, o.TenantAccessInSync(), tenantAccessReason(o.TenantAccess), o.TenantAccess.Detail, gen),
	}
	if vc.AllowFractionalGPUs {
		notice := vc.FractionalGPUsNotice()
		out = append(out, setCondition(prev, CondFractionalGPUs, notice == "", why(notice == "", "Available", "ChartDropsGPUGroup"), notice, gen))
	}
	return out
}

// advisory conditions inform the owner without holding READY back.
var advisory = map[string]bool{CondFractionalGPUs: true}

func tenantAccessReason(t hostcluster.TenantAccessState) string {
	switch {
	case !t.Applicable:
		return "NotApplicable"
	case t.InSync:
		return "InSync"
	case t.Detail == "" || strings.HasPrefix(t.Detail, "waiting"):
		return "Waiting"
	default:
		return "Drifted"
	}
}

func releaseMessage(o hostcluster.Observed) string {
	if o.Release == nil {
		return "no release"
	}
	return fmt.Sprintf("revision %d, %s", o.Release.Revision, o.Release.Status)
}

// conditionsFromSteps records a failed apply: steps before the failure
// hold, the failing one is false with the error.
func conditionsFromSteps(prev []vcs.Condition, steps hostcluster.Steps, gen int64) []vcs.Condition {
	byStep := map[hostcluster.Step]string{
		hostcluster.StepNamespace: CondNamespace, hostcluster.StepQueues: CondQueues, hostcluster.StepGuardrails: CondGuardrails,
		hostcluster.StepNetworkPolicy: CondNetworkPolicy, hostcluster.StepRelease: CondRelease,
		hostcluster.StepTenantAccess: CondTenantAccess,
	}
	out := make([]vcs.Condition, 0, len(steps))
	for _, s := range steps {
		typ := byStep[s.Step]
		if typ == "" {
			continue
		}
		if s.Err != nil {
			out = append(out, setCondition(prev, typ, false, "ApplyFailed", oneLine(truncate(s.Err.Error(), 500)), gen))
		} else {
			out = append(out, setCondition(prev, typ, true, "Applied", s.Detail, gen))
		}
	}
	return out
}

// notReadySince lists the conditions not ready since before t.
func notReadySince(conds []vcs.Condition, t time.Time) []string {
	var out []string
	for _, c := range conds {
		if c.Status != vcs.ConditionTrue && c.LastTransitionTime.Before(t) {
			out = append(out, c.Type)
		}
	}
	return out
}

func notReady(conds []vcs.Condition) []string {
	var out []string
	for _, c := range conds {
		if !c.IsTrue() && !advisory[c.Type] {
			out = append(out, c.Type)
		}
	}
	return out
}
