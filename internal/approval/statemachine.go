// Package approval owns requests, their state machine, auto-approval
// policies and virtual clusters' lifecycle in the database. All quota rules
// run through tenancy's hierarchy checks inside one transaction.
package approval

import (
	"github.com/gpuplane/gpuplane/internal/errs"
)

// Request states.
const (
	StatePending   = "PENDING"
	StateApproved  = "APPROVED"
	StateRejected  = "REJECTED"
	StateCancelled = "CANCELLED"
	StateApplied   = "APPLIED"
	StateFailed    = "FAILED"
)

var requestTransitions = map[string][]string{
	StatePending:  {StateApproved, StateRejected, StateCancelled},
	StateApproved: {StateApplied, StateFailed},
}

// CanTransition reports whether a request may move from one state to another.
func CanTransition(from, to string) bool {
	for _, s := range requestTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// transitionError explains a forbidden move in terms a user understands.
func transitionError(resource, from, to string) error {
	verb := map[string]string{
		StateApproved: "approved", StateRejected: "rejected", StateCancelled: "cancelled",
		StateApplied: "marked applied", StateFailed: "marked failed",
	}[to]
	return errs.FailedPrecondition(errs.ReasonInvalidTransition,
		"%s is %s and can no longer be %s", resource, from, verb).With("state", from).With("target_state", to)
}

// Virtual-cluster phases.
const (
	PhasePendingApproval = "PENDING_APPROVAL"
	PhaseProvisioning    = "PROVISIONING"
	PhaseReady           = "READY"
	PhaseDegraded        = "DEGRADED"
	PhaseDeleting        = "DELETING"
	PhaseDeleted         = "DELETED"
	PhaseFailed          = "FAILED"
	PhaseRejected        = "REJECTED"
)

var phaseTransitions = map[string][]string{
	PhasePendingApproval: {PhaseProvisioning, PhaseRejected},
	PhaseProvisioning:    {PhaseReady, PhaseDegraded, PhaseFailed, PhaseDeleting},
	PhaseReady:           {PhaseDegraded, PhaseProvisioning, PhaseDeleting},
	PhaseDegraded:        {PhaseReady, PhaseProvisioning, PhaseFailed, PhaseDeleting},
	PhaseFailed:          {PhaseProvisioning, PhaseDeleting},
	PhaseDeleting:        {PhaseDeleted, PhaseFailed},
}

// CanMovePhase reports whether a virtual cluster may move between phases.
// Staying in a phase is always allowed (a resync that changes nothing).
func CanMovePhase(from, to string) bool {
	if from == to {
		return true
	}
	for _, p := range phaseTransitions[from] {
		if p == to {
			return true
		}
	}
	return false
}

// Live phases: the virtual cluster exists (or is being built) on the host
// and holds quota.
func isLive(phase string) bool {
	switch phase {
	case PhaseProvisioning, PhaseReady, PhaseDegraded, PhaseFailed:
		return true
	}
	return false
}
