package virtualcluster

import "testing"

var allPhases = []Phase{PhasePendingApproval, PhaseProvisioning, PhaseReady, PhaseDegraded, PhaseDeleting, PhaseDeleted, PhaseFailed, PhaseRejected, PhaseSleeping}

func TestStateMachineCanMovePhase(t *testing.T) {
	allowed := map[[2]Phase]bool{
		{PhasePendingApproval, PhaseProvisioning}: true,
		{PhasePendingApproval, PhaseRejected}:     true,

		{PhaseProvisioning, PhaseReady}:    true,
		{PhaseProvisioning, PhaseDegraded}: true,
		{PhaseProvisioning, PhaseFailed}:   true,
		{PhaseProvisioning, PhaseDeleting}: true,

		{PhaseReady, PhaseDegraded}:     true,
		{PhaseReady, PhaseProvisioning}: true,
		{PhaseReady, PhaseDeleting}:     true,

		{PhaseDegraded, PhaseReady}:        true,
		{PhaseDegraded, PhaseProvisioning}: true,
		{PhaseDegraded, PhaseFailed}:       true,
		{PhaseDegraded, PhaseDeleting}:     true,

		{PhaseFailed, PhaseProvisioning}: true,
		{PhaseFailed, PhaseDeleting}:     true,

		{PhaseDeleting, PhaseDeleted}: true,
		{PhaseDeleting, PhaseFailed}:  true,

		// Sleep: converged asleep from any awake live phase; wake goes
		// through PROVISIONING.
		{PhaseProvisioning, PhaseSleeping}: true,
		{PhaseReady, PhaseSleeping}:        true,
		{PhaseDegraded, PhaseSleeping}:     true,
		{PhaseSleeping, PhaseProvisioning}: true,
		{PhaseSleeping, PhaseFailed}:       true,
		{PhaseSleeping, PhaseDeleting}:     true,
	}
	for _, from := range allPhases {
		for _, to := range allPhases {
			// Staying in a phase is always allowed (a resync that changes
			// nothing); everything else must be listed.
			want := from == to || allowed[[2]Phase{from, to}]
			if got := from.CanMoveTo(to); got != want {
				t.Errorf("CanMovePhase(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	// DELETED and REJECTED are final: nothing leaves them.
	for _, from := range []Phase{PhaseDeleted, PhaseRejected} {
		for _, to := range allPhases {
			if to != from && from.CanMoveTo(to) {
				t.Errorf("final phase %s may move to %s", from, to)
			}
		}
	}
	if PhaseReady.CanMoveTo("BOGUS") || Phase("BOGUS").CanMoveTo(PhaseReady) {
		t.Error("unknown phases must not be reachable")
	}
}

func TestStateMachineLivePhases(t *testing.T) {
	live := map[Phase]bool{PhaseProvisioning: true, PhaseReady: true, PhaseDegraded: true, PhaseFailed: true, PhaseSleeping: true}
	for _, p := range allPhases {
		if got := p.IsLive(); got != live[p] {
			t.Errorf("isLive(%s) = %v, want %v", p, got, live[p])
		}
	}
}

// The sets the SQL uses, each defined once by the phase table.
func TestPhaseSets(t *testing.T) {
	for _, tc := range []struct {
		name string
		pred func(Phase) bool
		want []string
	}{
		{"holds quota", Phase.HoldsQuota, []string{"PROVISIONING", "READY", "DEGRADED", "DELETING", "FAILED", "SLEEPING"}},
		{"needs resync", Phase.NeedsResync, []string{"PROVISIONING", "READY", "DEGRADED", "SLEEPING"}},
		{"live", Phase.IsLive, []string{"PROVISIONING", "READY", "DEGRADED", "FAILED", "SLEEPING"}},
		{"reachable", Phase.IsReachable, []string{"READY", "DEGRADED"}},
		{"gone", Phase.IsGone, []string{"DELETED", "REJECTED"}},
		{"valid", Phase.Valid, []string{"PENDING_APPROVAL", "PROVISIONING", "READY", "DEGRADED", "DELETING", "DELETED", "FAILED", "REJECTED", "SLEEPING"}},
	} {
		got := PhasesWhere(tc.pred)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
	if Phase("BOGUS").HoldsQuota() || Phase("BOGUS").Valid() {
		t.Error("an unknown phase holds nothing")
	}
	if got := PhasePendingApproval.Word(); got != "PendingApproval" {
		t.Errorf("Word = %q", got)
	}
}
