package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/request"
	vcs "github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// CondAsleep says the control plane is scaled to zero, no workload pod the
// syncer created is left on the host and the leaf queue admits nothing.
// Present while the virtual cluster sleeps or is going to sleep.
const CondAsleep = "Asleep"

// sleepConditions are what a sleeping virtual cluster is judged by: the
// objects that stay while it sleeps, and whether it is asleep. The
// control plane, kubeconfig, endpoint and tenant access conditions of an
// awake one do not apply (its API server is not running).
func sleepConditions(prev []vcs.Condition, o hostcluster.Observed, gen int64) []vcs.Condition {
	why := func(ok bool, yes, no string) string {
		if ok {
			return yes
		}
		return no
	}
	asleep := o.ControlPlaneStopped && o.WorkloadPods == 0
	var detail []string
	if !o.ControlPlaneStopped {
		detail = append(detail, "control plane still running")
	}
	if o.WorkloadPods > 0 {
		detail = append(detail, fmt.Sprintf("%d workload pods left", o.WorkloadPods))
	}
	if asleep {
		detail = append(detail, "control plane scaled to zero, no workload pods, leaf queue limit 0")
	}
	return []vcs.Condition{
		setCondition(prev, CondNamespace, o.NamespaceExists, why(o.NamespaceExists, "Exists", "Missing"), "", gen),
		setCondition(prev, CondQueues, o.QueuesInSync(), why(o.QueuesInSync(), "InSync", "Drifted"), "", gen),
		setCondition(prev, CondGuardrails, o.GuardrailsPresent, why(o.GuardrailsPresent, "Present", "Missing"), strings.Join(o.GuardrailWarnings, "; "), gen),
		setCondition(prev, CondNetworkPolicy, o.NetworkPolicyPresent, why(o.NetworkPolicyPresent, "Present", "Missing"), "", gen),
		setCondition(prev, CondRelease, o.ReleaseDeployed() && o.ReleaseUpToDate, why(o.ReleaseDeployed(), "Deployed", "NotDeployed"), releaseMessage(o), gen),
		setCondition(prev, CondAsleep, asleep, why(asleep, "Asleep", "GoingToSleep"), strings.Join(detail, ", "), gen),
	}
}

// recordSleep records the status of a virtual cluster that should be
// asleep: SLEEPING once the host shows it, otherwise its phase stays (the
// generation is not observed yet) and it is looked at again soon.
func (w *Worker) recordSleep(ctx context.Context, c claim, d desiredState, obs hostcluster.Observed, drift []string) error {
	conds := sleepConditions(d.vc.Conditions, obs, d.vc.Generation)
	conds = append(conds, setCondition(d.vc.Conditions, CondHostCluster, true, "Connected", describeHost(d.cluster), d.vc.Generation))
	var phase vcs.Phase
	msg := "going to sleep: waiting for " + strings.Join(notReady(conds), ", ")
	if obs.Asleep() {
		phase, msg = vcs.PhaseSleeping, "asleep: control plane scaled to zero, workload pods removed, leaf queue admits nothing; :wake restores it"
	}
	return w.recordOutcome(ctx, c, d, conds, phase, msg, obs, drift, phase == vcs.PhaseSleeping)
}

// AutoSleepIdle puts every virtual cluster that is idle now (by the
// worker's clock) to sleep, for teams with auto-sleep on: no GPU
// allocated in its leaf queue (as last observed) and no activity for the
// team's auto_sleep_after. It returns how many it put to sleep. Several
// workers may run it at once: each virtual cluster is re-checked under
// its department's lock, and sleeping one twice changes nothing.
func (w *Worker) AutoSleepIdle(ctx context.Context) (int, error) {
	now := w.cfg.Now()
	ids, err := vcs.IdleForAutoSleep(ctx, w.DB, now, 100)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		slept, err := request.AutoSleep(ctx, w.DB, id, now)
		if err != nil {
			return n, fmt.Errorf("auto-sleep %s: %w", id, err)
		}
		if slept {
			n++
			w.Log.Info("idle virtual cluster put to sleep", "virtual_cluster", id)
		}
	}
	return n, nil
}
