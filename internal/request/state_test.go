package request

import (
	"testing"

	"github.com/gpuplane/gpuplane/internal/errs"
)

var allRequestStates = States

func TestStateMachineCanTransition(t *testing.T) {
	allowed := map[[2]State]bool{
		{StatePending, StateApproved}:  true,
		{StatePending, StateRejected}:  true,
		{StatePending, StateCancelled}: true,
		{StateApproved, StateApplied}:  true,
		{StateApproved, StateFailed}:   true,
	}
	// Every ordered pair, including staying put and unknown states.
	states := append([]State{"", "UNKNOWN"}, allRequestStates...)
	n := 0
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]State{from, to}]
			if want {
				n++
			}
			if got := from.CanMoveTo(to); got != want {
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
	for _, from := range []State{StateRejected, StateCancelled, StateApplied, StateFailed} {
		for _, to := range allRequestStates {
			if from.CanMoveTo(to) {
				t.Errorf("terminal state %s may move to %s", from, to)
			}
		}
	}
}

func TestStateMachineTransitionError(t *testing.T) {
	for _, tc := range []struct {
		from, to State
		verb     string
	}{
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
		if e.Reason != "INVALID_STATE_TRANSITION" || e.Metadata["state"] != string(tc.from) || e.Metadata["target_state"] != string(tc.to) {
			t.Errorf("transitionError(%s->%s) = reason %q metadata %v", tc.from, tc.to, e.Reason, e.Metadata)
		}
		want := "requests/r1 is " + string(tc.from) + " and can no longer be " + tc.verb
		if e.Message != want {
			t.Errorf("message %q, want %q", e.Message, want)
		}
	}
}

func TestStateWord(t *testing.T) {
	for s, want := range map[State]string{StateApplied: "Applied", StateFailed: "Failed", "": ""} {
		if got := s.Word(); got != want {
			t.Errorf("%q.Word() = %q, want %q", s, got, want)
		}
	}
}
