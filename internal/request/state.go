package request

import (
	"slices"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// State is where a request is in its life (the API's Request.State names).
type State string

// Request states.
const (
	StatePending   State = "PENDING"
	StateApproved  State = "APPROVED"
	StateRejected  State = "REJECTED"
	StateCancelled State = "CANCELLED"
	StateApplied   State = "APPLIED"
	StateFailed    State = "FAILED"
)

// States are all states, in API order.
var States = []State{StatePending, StateApproved, StateRejected, StateCancelled, StateApplied, StateFailed}

var transitions = map[State][]State{
	StatePending:  {StateApproved, StateRejected, StateCancelled},
	StateApproved: {StateApplied, StateFailed},
}

// CanMoveTo reports whether a request may move from s to next.
func (s State) CanMoveTo(next State) bool { return slices.Contains(transitions[s], next) }

// Word is the state in CamelCase for audit action names ("APPLIED" ->
// "Applied").
func (s State) Word() string {
	if s == "" {
		return ""
	}
	b := []byte(string(s))
	for i := 1; i < len(b); i++ {
		if b[i] >= 'A' && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}

// transitionError explains a forbidden move in terms a user understands.
func transitionError(resource string, from, to State) error {
	verb := map[State]string{
		StateApproved: "approved", StateRejected: "rejected", StateCancelled: "cancelled",
		StateApplied: "marked applied", StateFailed: "marked failed",
	}[to]
	return errs.FailedPrecondition(errs.ReasonInvalidTransition,
		"%s is %s and can no longer be %s", resource, from, verb).With("state", string(from)).With("target_state", string(to))
}
