// Package virtualcluster holds the virtual-cluster record: its spec, its
// typed Phase and the rules over phases, its conditions, and the
// repository that owns the virtual_clusters table. It knows nothing of
// gRPC, HTTP or Kubernetes.
package virtualcluster

import "slices"

// Phase is where a virtual cluster is in its life. The values are the API's
// VirtualClusterStatus.Phase names and are stored as text.
type Phase string

// Phases.
const (
	PhasePendingApproval Phase = "PENDING_APPROVAL"
	PhaseProvisioning    Phase = "PROVISIONING"
	PhaseReady           Phase = "READY"
	PhaseDegraded        Phase = "DEGRADED"
	PhaseDeleting        Phase = "DELETING"
	PhaseDeleted         Phase = "DELETED"
	PhaseFailed          Phase = "FAILED"
	PhaseRejected        Phase = "REJECTED"
	PhaseSleeping        Phase = "SLEEPING"
)

// rules are what a phase means; every question about phases is answered
// from this table (in Go and, through PhasesWhere, in SQL).
type rules struct {
	// holdsQuota: approved and not yet gone; counts against the team.
	holdsQuota bool
	// live: exists (or is being built) on the host; may be resized,
	// deleted or expired.
	live bool
	// resync: the worker converges it on its desired state, and changes
	// to its team or department re-apply it.
	resync bool
	// reachable: its API server answers; kubeconfigs are handed out.
	reachable bool
	// gone: final; its name may be used again and it no longer keeps its
	// team from being deleted.
	gone bool
	next []Phase
}

// table lists every phase once, in API order; adding a phase is one line.
var table = []struct {
	phase Phase
	rules rules
}{
	{PhasePendingApproval, rules{next: []Phase{PhaseProvisioning, PhaseRejected}}},
	{PhaseProvisioning, rules{holdsQuota: true, live: true, resync: true, next: []Phase{PhaseReady, PhaseDegraded, PhaseFailed, PhaseDeleting, PhaseSleeping}}},
	{PhaseReady, rules{holdsQuota: true, live: true, resync: true, reachable: true, next: []Phase{PhaseDegraded, PhaseProvisioning, PhaseDeleting, PhaseSleeping}}},
	{PhaseDegraded, rules{holdsQuota: true, live: true, resync: true, reachable: true, next: []Phase{PhaseReady, PhaseProvisioning, PhaseFailed, PhaseDeleting, PhaseSleeping}}},
	{PhaseDeleting, rules{holdsQuota: true, next: []Phase{PhaseDeleted, PhaseFailed}}},
	{PhaseDeleted, rules{gone: true}},
	{PhaseFailed, rules{holdsQuota: true, live: true, next: []Phase{PhaseProvisioning, PhaseDeleting}}},
	{PhaseRejected, rules{gone: true}},
	// Asleep: still placed and holding its quota; the worker keeps it
	// asleep (an outage of its host cluster leaves it SLEEPING, nothing
	// runs anyway); wake moves it to PROVISIONING.
	{PhaseSleeping, rules{holdsQuota: true, live: true, resync: true, next: []Phase{PhaseProvisioning, PhaseFailed, PhaseDeleting}}},
}

func (p Phase) rules() (rules, bool) {
	for _, e := range table {
		if e.phase == p {
			return e.rules, true
		}
	}
	return rules{}, false
}

// Valid reports whether p is a known phase.
func (p Phase) Valid() bool { _, ok := p.rules(); return ok }

// HoldsQuota reports approved and not gone: its quota counts against its team.
func (p Phase) HoldsQuota() bool { r, _ := p.rules(); return r.holdsQuota }

// IsLive reports on the host (or being built): may be resized, deleted, expired.
func (p Phase) IsLive() bool { r, _ := p.rules(); return r.live }

// NeedsResync reports that the worker converges it and re-applies it on resync.
func (p Phase) NeedsResync() bool { r, _ := p.rules(); return r.resync }

// IsReachable reports that its API server serves: kubeconfigs are handed out.
func (p Phase) IsReachable() bool { r, _ := p.rules(); return r.reachable }

// IsGone reports final phases: the name may be reused.
func (p Phase) IsGone() bool { r, _ := p.rules(); return r.gone }

// CanMoveTo reports whether a virtual cluster may move from p to next.
// Staying in a phase is always allowed (a resync that changes nothing).
func (p Phase) CanMoveTo(next Phase) bool {
	if p == next {
		return true
	}
	r, _ := p.rules()
	return slices.Contains(r.next, next)
}

// Word is the phase in CamelCase for audit action names
// ("PENDING_APPROVAL" -> "PendingApproval").
func (p Phase) Word() string { return camelWord(string(p)) }

// Phases are all phases in API order.
func Phases() []Phase {
	out := make([]Phase, len(table))
	for i, e := range table {
		out[i] = e.phase
	}
	return out
}

// PhasesWhere lists the phases a predicate holds for, as strings for SQL
// (`phase = ANY($n)`), so a rule such as "holds quota" is written once.
func PhasesWhere(pred func(Phase) bool) []string {
	var out []string
	for _, e := range table {
		if pred(e.phase) {
			out = append(out, string(e.phase))
		}
	}
	return out
}
