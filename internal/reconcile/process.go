package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/approval"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
)

var actor = audit.SystemActor("worker")

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
)

func (w *Worker) step(name string) {
	if w.beforeStep != nil {
		w.beforeStep(name)
	}
}

// process runs one claimed reconcile to its outcome.
func (w *Worker) process(ctx context.Context, c claim) {
	ctx, job := w.tel.startJob(ctx, c)
	log := w.Log.With("virtual_cluster", c.vcID, "attempt", c.attempts)
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
	d, err := load(ctx, w.Pool, c.vcID)
	if errs.KindOf(err) == errs.KindNotFound {
		return w.done(ctx, c)
	}
	if err != nil {
		return err
	}
	cp.generation = d.vc.Generation
	switch d.vc.Phase {
	case approval.PhaseDeleting:
		w.step("delete")
		if err := w.Host.Delete(ctx, d.host); err != nil {
			return err
		}
		w.step("record-deleted")
		if err := w.finishDelete(ctx, d); err != nil {
			return err
		}
		return w.done(ctx, c)
	case approval.PhaseProvisioning, approval.PhaseReady, approval.PhaseDegraded:
	default:
		// PENDING_APPROVAL, REJECTED, DELETED, FAILED: nothing to converge.
		return w.done(ctx, c)
	}

	var drift []string
	if d.vc.Phase != approval.PhaseProvisioning {
		w.step("observe-before")
		before, err := w.Host.Observe(ctx, d.host)
		if err != nil {
			return err
		}
		drift = describeDrift(before)
	}
	w.step("apply")
	steps, applyErr := w.Host.Apply(ctx, d.host)
	if applyErr != nil {
		// Record which step broke, then let fail() decide retry vs FAILED.
		_ = w.writeStatus(ctx, d, conditionsFromSteps(d.vc.Conditions, steps, d.vc.Generation), "", nil, nil)
		return applyErr
	}
	w.step("observe")
	obs, err := w.Host.Observe(ctx, d.host)
	if err != nil {
		return err
	}
	conds := conditions(d.vc.Conditions, obs, d.vc.Generation)
	phase := approval.PhaseProvisioning
	msg := "waiting for: " + strings.Join(notReady(conds), ", ")
	if obs.Ready() {
		phase, msg = approval.PhaseReady, ""
	} else if d.vc.Phase != approval.PhaseProvisioning && d.vc.ObservedGeneration == d.vc.Generation {
		phase = approval.PhaseDegraded
		msg = "degraded: " + strings.Join(notReady(conds), ", ") + " not ready"
	}
	w.step("record-status")
	if err := w.writeStatus(ctx, d, conds, phase, &msg, &obs); err != nil {
		return err
	}
	if len(drift) > 0 {
		w.Log.Info("repaired drift on the host cluster", "virtual_cluster", d.vc.ID, "drift", drift)
		if err := w.auditDrift(ctx, d, drift); err != nil {
			return err
		}
	}
	if phase == approval.PhaseReady {
		return w.done(ctx, c)
	}
	// The control plane or kubeconfig is not there yet: look again soon
	// without counting it as a failure.
	markRequeued(ctx)
	return w.later(ctx, c, w.cfg.Poll, nil)
}

// writeStatus stores conditions (and phase/message/observation when set)
// and, once the host reflects generation G, marks requests that targeted
// G or earlier as APPLIED.
func (w *Worker) writeStatus(ctx context.Context, d desiredState, conds []*pb.Condition, phase string, msg *string, obs *hostcluster.Observed) error {
	raw, err := approval.EncodeConditions(conds)
	if err != nil {
		return err
	}
	return store.InTx(ctx, w.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := approval.GetVirtualClusterRow(ctx, tx, d.vc.ID, true)
		if err != nil {
			return err
		}
		if cur.Phase == approval.PhaseDeleting || cur.Phase == approval.PhaseDeleted {
			return nil // a delete overtook us; its reconcile owns the status now
		}
		next := cur.Phase
		if phase != "" && cur.Generation == d.vc.Generation && approval.CanMovePhase(cur.Phase, phase) {
			next = phase
		}
		observed := cur.ObservedGeneration
		if phase != "" && cur.Generation == d.vc.Generation {
			observed = d.vc.Generation
		}
		message := cur.StatusMessage
		if msg != nil {
			message = *msg
		}
		alloc := cur.Allocated
		endpoint := cur.Endpoint
		if obs != nil {
			if obs.Allocated != nil {
				alloc = quota.Resources{GPU: quota.GPU(obs.Allocated.GPUCenti), CPUMillis: obs.Allocated.CPUMillis, MemoryBytes: obs.Allocated.MemoryBytes}
			}
			endpoint = obs.Endpoint
		}
		before := cur.Proto()
		if _, err := tx.Exec(ctx, `UPDATE virtual_clusters SET phase = $2, conditions = $3, observed_generation = $4,
			status_message = $5, alloc_gpu_centi = $6, alloc_cpu_millis = $7, alloc_memory_bytes = $8, endpoint = $9,
			version = version + 1, update_time = now() WHERE id = $1`,
			cur.ID, next, raw, observed, truncate(message, 2000), alloc.GPU, alloc.CPUMillis, alloc.MemoryBytes, endpoint); err != nil {
			return err
		}
		if observed == d.vc.Generation {
			if err := w.settleRequests(ctx, tx, d, observed, approval.StateApplied, ""); err != nil {
				return err
			}
		}
		if next != cur.Phase {
			after, err := approval.GetVirtualClusterRow(ctx, tx, cur.ID, false)
			if err != nil {
				return err
			}
			return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "VirtualClusterPhase" + phaseWord(next),
				Resource: cur.Name(), Department: d.team.Department, Team: d.team.ID, Before: before, After: after.Proto()})
		}
		return nil
	})
}

// phaseWord turns "PENDING_APPROVAL" into "PendingApproval" for action names.
func phaseWord(p string) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.ToLower(p), "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// settleRequests moves APPROVED requests carried by generations up to gen
// to state (APPLIED or FAILED).
func (w *Worker) settleRequests(ctx context.Context, tx pgx.Tx, d desiredState, gen int64, state, failure string) error {
	rows, err := tx.Query(ctx, `UPDATE requests SET state = $3, failure_message = $4, version = version + 1, update_time = now()
		WHERE virtual_cluster_id = $1 AND state = 'APPROVED' AND target_generation <= $2 RETURNING id`,
		d.vc.ID, gen, state, truncate(failure, 2000))
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "Request" + phaseWord(state), Resource: "requests/" + id,
			Department: d.team.Department, Team: d.team.ID}); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) finishDelete(ctx context.Context, d desiredState) error {
	return store.InTx(ctx, w.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := approval.GetVirtualClusterRow(ctx, tx, d.vc.ID, true)
		if err != nil || cur.Phase != approval.PhaseDeleting {
			return err
		}
		before := cur.Proto()
		if _, err := tx.Exec(ctx, `UPDATE virtual_clusters SET phase = 'DELETED', observed_generation = generation,
			conditions = '[]', status_message = '', endpoint = '', alloc_gpu_centi = 0, alloc_cpu_millis = 0,
			alloc_memory_bytes = 0, version = version + 1, update_time = now() WHERE id = $1`, cur.ID); err != nil {
			return err
		}
		if err := w.settleRequests(ctx, tx, d, cur.Generation, approval.StateApplied, ""); err != nil {
			return err
		}
		after, err := approval.GetVirtualClusterRow(ctx, tx, cur.ID, false)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "VirtualClusterDeleted", Resource: cur.Name(),
			Department: d.team.Department, Team: d.team.ID, Before: before, After: after.Proto()})
	})
}

// fail records a failed attempt: retried with backoff, or FAILED (with the
// requests it carried) once attempts run out or the error is permanent.
func (w *Worker) fail(ctx context.Context, c claim, cause error) error {
	if c.attempts < w.cfg.MaxAttempts && !permanent(cause) {
		return w.later(ctx, c, w.backoff(c.attempts), cause)
	}
	d, err := load(ctx, w.Pool, c.vcID)
	if err != nil {
		return err
	}
	attempted := c.generation
	if attempted == 0 { // failed before the virtual cluster was read
		attempted = d.vc.Generation
	}
	msg := oneLine(truncate(cause.Error(), 2000))
	if !permanent(cause) {
		msg = fmt.Sprintf("gave up after %d attempts: %s", c.attempts, msg)
	}
	err = store.InTx(ctx, w.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := approval.GetVirtualClusterRow(ctx, tx, d.vc.ID, true)
		if err != nil {
			return err
		}
		if cur.Generation != attempted {
			return nil // a newer desired state arrived; it gets its own attempts
		}
		before := cur.Proto()
		if cur.ObservedGeneration == cur.Generation && approval.CanMovePhase(cur.Phase, approval.PhaseDegraded) {
			// The host already reflects this generation, so no change failed:
			// the host cluster did (a resync or a readiness check). READY may
			// not become FAILED (approval.CanMovePhase) and FAILED is never
			// resynced; DEGRADED is, so the next resync tries again.
			msg := fmt.Sprintf("degraded: %s (%d attempts; retried at the next resync)", oneLine(truncate(cause.Error(), 2000)), c.attempts)
			if _, err := tx.Exec(ctx, `UPDATE virtual_clusters SET phase = $2, status_message = $3,
				version = version + 1, update_time = now() WHERE id = $1`, cur.ID, approval.PhaseDegraded, msg); err != nil {
				return err
			}
			if cur.Phase == approval.PhaseDegraded {
				return nil
			}
			after, err := approval.GetVirtualClusterRow(ctx, tx, cur.ID, false)
			if err != nil {
				return err
			}
			return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "VirtualClusterPhase" + phaseWord(approval.PhaseDegraded),
				Resource: cur.Name(), Department: d.team.Department, Team: d.team.ID, Before: before, After: after.Proto()})
		}
		if _, err := tx.Exec(ctx, `UPDATE virtual_clusters SET phase = 'FAILED', status_message = $2,
			version = version + 1, update_time = now() WHERE id = $1`, cur.ID, msg); err != nil {
			return err
		}
		if err := w.settleRequests(ctx, tx, d, cur.Generation, approval.StateFailed, msg); err != nil {
			return err
		}
		after, err := approval.GetVirtualClusterRow(ctx, tx, cur.ID, false)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "VirtualClusterFailed", Resource: cur.Name(),
			Department: d.team.Department, Team: d.team.ID, Before: before, After: after.Proto()})
	})
	if err != nil {
		return err
	}
	return w.done(ctx, c)
}

func (w *Worker) auditDrift(ctx context.Context, d desiredState, drift []string) error {
	return store.InTx(ctx, w.Pool, store.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		cur, err := approval.GetVirtualClusterRow(ctx, tx, d.vc.ID, false)
		if err != nil {
			return err
		}
		after := cur.Proto()
		after.Status.Message = "repaired drift: " + strings.Join(drift, "; ")
		return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: "RepairDrift", Resource: cur.Name(),
			Department: d.team.Department, Team: d.team.ID, After: after})
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
func setCondition(prev []*pb.Condition, typ string, ok bool, reason, message string, gen int64) *pb.Condition {
	st := pb.Condition_FALSE
	if ok {
		st = pb.Condition_TRUE
	}
	c := &pb.Condition{Type: typ, Status: st, Reason: reason, Message: message, ObservedGeneration: gen, LastTransitionTime: timestamppb.Now()}
	for _, p := range prev {
		if p.GetType() == typ && p.GetStatus() == st {
			c.LastTransitionTime = p.GetLastTransitionTime()
		}
	}
	return c
}

func conditions(prev []*pb.Condition, o hostcluster.Observed, gen int64) []*pb.Condition {
	why := func(ok bool, yes, no string) string {
		if ok {
			return yes
		}
		return no
	}
	return []*pb.Condition{
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
}

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
func conditionsFromSteps(prev []*pb.Condition, steps hostcluster.Steps, gen int64) []*pb.Condition {
	byStep := map[hostcluster.Step]string{
		hostcluster.StepNamespace: CondNamespace, hostcluster.StepQueues: CondQueues, hostcluster.StepGuardrails: CondGuardrails,
		hostcluster.StepNetworkPolicy: CondNetworkPolicy, hostcluster.StepRelease: CondRelease,
		hostcluster.StepTenantAccess: CondTenantAccess,
	}
	out := make([]*pb.Condition, 0, len(steps))
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

func notReady(conds []*pb.Condition) []string {
	var out []string
	for _, c := range conds {
		if c.GetStatus() != pb.Condition_TRUE {
			out = append(out, c.GetType())
		}
	}
	return out
}
