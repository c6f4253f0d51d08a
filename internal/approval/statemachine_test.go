package approval

import (
	"testing"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
)

var allRequestStates = []string{StatePending, StateApproved, StateRejected, StateCancelled, StateApplied, StateFailed}

var allPhases = []string{PhasePendingApproval, PhaseProvisioning, PhaseReady, PhaseDegraded, PhaseDeleting, PhaseDeleted, PhaseFailed, PhaseRejected}

// The string constants must stay the proto enum names: they are stored in
// the database and rendered through pb.*_value lookups.
func TestStateNamesMatchProto(t *testing.T) {
	for _, s := range allRequestStates {
		if _, ok := pb.Request_State_value[s]; !ok {
			t.Errorf("request state %q is not a Request.State", s)
		}
	}
	if got, want := len(allRequestStates), len(pb.Request_State_value)-1; got != want {
		t.Errorf("test covers %d request states, the proto has %d (besides UNSPECIFIED)", got, want)
	}
	for _, p := range allPhases {
		if _, ok := pb.VirtualClusterStatus_Phase_value[p]; !ok {
			t.Errorf("phase %q is not a VirtualClusterStatus.Phase", p)
		}
	}
	if got, want := len(allPhases), len(pb.VirtualClusterStatus_Phase_value)-1; got != want {
		t.Errorf("test covers %d phases, the proto has %d (besides UNSPECIFIED)", got, want)
	}
}

func TestStateMachineCanTransition(t *testing.T) {
	allowed := map[[2]string]bool{
		{StatePending, StateApproved}:  true,
		{StatePending, StateRejected}:  true,
		{StatePending, StateCancelled}: true,
		{StateApproved, StateApplied}:  true,
		{StateApproved, StateFailed}:   true,
	}
	// Every ordered pair, including staying put and unknown states.
	states := append([]string{"", "UNKNOWN"}, allRequestStates...)
	n := 0
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]string{from, to}]
			if want {
				n++
			}
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%q, %q) = %v, want %v", from, to, got, want)
			}
		}
	}
	if n != len(allowed) {
		t.Fatalf("table lists %d allowed moves but only %d were exercised", len(allowed), n)
	}
}

// Terminal states accept nothing: a decided request is never decided again.
func TestStateMachineTerminalStates(t *testing.T) {
	for _, from := range []string{StateRejected, StateCancelled, StateApplied, StateFailed} {
		for _, to := range allRequestStates {
			if CanTransition(from, to) {
				t.Errorf("terminal state %s may move to %s", from, to)
			}
		}
	}
}

func TestStateMachineTransitionError(t *testing.T) {
	for _, tc := range []struct{ from, to, verb string }{
		{StateApproved, StateApproved, "approved"},
		{StateRejected, StateCancelled, "cancelled"},
		{StateCancelled, StateRejected, "rejected"},
		{StateApplied, StateFailed, "marked failed"},
	} {
		err := transitionError("requests/r1", tc.from, tc.to)
		e, ok := errs.As(err)
		if !ok {
			t.Fatalf("transitionError returned %T", err)
		}
		if e.Reason != "INVALID_STATE_TRANSITION" || e.Metadata["state"] != tc.from || e.Metadata["target_state"] != tc.to {
			t.Errorf("transitionError(%s->%s) = reason %q metadata %v", tc.from, tc.to, e.Reason, e.Metadata)
		}
		want := "requests/r1 is " + tc.from + " and can no longer be " + tc.verb
		if e.Message != want {
			t.Errorf("message %q, want %q", e.Message, want)
		}
	}
}

func TestStateMachineCanMovePhase(t *testing.T) {
	allowed := map[[2]string]bool{
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
	}
	for _, from := range allPhases {
		for _, to := range allPhases {
			// Staying in a phase is always allowed (a resync that changes
			// nothing); everything else must be listed.
			want := from == to || allowed[[2]string{from, to}]
			if got := CanMovePhase(from, to); got != want {
				t.Errorf("CanMovePhase(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	// DELETED and REJECTED are final: nothing leaves them.
	for _, from := range []string{PhaseDeleted, PhaseRejected} {
		for _, to := range allPhases {
			if to != from && CanMovePhase(from, to) {
				t.Errorf("final phase %s may move to %s", from, to)
			}
		}
	}
	if CanMovePhase(PhaseReady, "BOGUS") || CanMovePhase("BOGUS", PhaseReady) {
		t.Error("unknown phases must not be reachable")
	}
}

func TestStateMachineLivePhases(t *testing.T) {
	live := map[string]bool{PhaseProvisioning: true, PhaseReady: true, PhaseDegraded: true, PhaseFailed: true}
	for _, p := range allPhases {
		if got := isLive(p); got != live[p] {
			t.Errorf("isLive(%s) = %v, want %v", p, got, live[p])
		}
	}
}
