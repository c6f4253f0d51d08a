// Package eventtype is the vocabulary of the change feed: the event types
// (what Watch streams carry and webhooks deliver, e.g. "request.approved"),
// the audit actions that produce them and the pattern language webhook
// subscriptions filter with. It is a leaf: audit writes the type beside
// each audit event, internal/events sequences and streams them,
// internal/webhook delivers them.
package eventtype

import (
	"fmt"
	"slices"
	"strings"
)

// Kinds: the object an event is about (the part of the type before the dot).
const (
	KindRequest        = "request"
	KindVirtualCluster = "virtualcluster"
	KindTeam           = "team"
	KindDepartment     = "department"
	KindMember         = "member"
	KindPolicy         = "policy"
	KindWebhook        = "webhook"
)

// Event types. A type never changes meaning; new ones may be added.
const (
	RequestCreated   = "request.created"
	RequestApproved  = "request.approved"
	RequestRejected  = "request.rejected"
	RequestCancelled = "request.cancelled"
	RequestApplied   = "request.applied"
	RequestFailed    = "request.failed"

	// VirtualClusterCreated: a create request put it in PENDING_APPROVAL.
	VirtualClusterCreated = "virtualcluster.created"
	// VirtualClusterUpdated: the spec changed (quota, versions) and the
	// phase did not.
	VirtualClusterUpdated = "virtualcluster.updated"
	// VirtualClusterPhaseChanged: status.phase changed (approval, READY,
	// DEGRADED, FAILED, REJECTED, DELETING ...).
	VirtualClusterPhaseChanged = "virtualcluster.phase_changed"
	// VirtualClusterStatusChanged: the status changed without a phase
	// change: conditions, endpoint, message or allocation.
	VirtualClusterStatusChanged = "virtualcluster.status_changed"
	// VirtualClusterDeleted: the host objects are gone (phase DELETED).
	VirtualClusterDeleted = "virtualcluster.deleted"

	TeamCreated      = "team.created"
	TeamUpdated      = "team.updated"
	TeamQuotaChanged = "team.quota_changed"
	TeamDeleted      = "team.deleted"

	DepartmentCreated = "department.created"
	DepartmentUpdated = "department.updated"
	DepartmentDeleted = "department.deleted"

	MemberCreated = "member.created"
	MemberUpdated = "member.updated"
	MemberDeleted = "member.deleted"

	PolicyCreated = "policy.created"
	PolicyUpdated = "policy.updated"
	PolicyDeleted = "policy.deleted"

	WebhookCreated       = "webhook.created"
	WebhookUpdated       = "webhook.updated"
	WebhookDeleted       = "webhook.deleted"
	WebhookSecretRotated = "webhook.secret_rotated"
	// WebhookDisabled: the platform disabled a subscription after a run of
	// failed deliveries.
	WebhookDisabled = "webhook.disabled"
)

// byAction maps audit actions to the event they produce. Actions that are
// not here (AutoApprovalSkipped, RepairDrift, BreakGlassKubeconfig, ...)
// record no state change of their object and produce no event; a few
// actions choose their type at the call site (audit.Event.EventType).
var byAction = map[string]string{
	"CreateRequest":  RequestCreated,
	"ApproveRequest": RequestApproved,
	"RejectRequest":  RequestRejected,
	"CancelRequest":  RequestCancelled,
	"RequestApplied": RequestApplied,
	"RequestFailed":  RequestFailed,

	"CreateVirtualCluster":        VirtualClusterCreated,
	"VirtualClusterStatusChanged": VirtualClusterStatusChanged,
	"VirtualClusterDeleted":       VirtualClusterDeleted,
	"VirtualClusterFailed":        VirtualClusterPhaseChanged,

	"CreateTeam":      TeamCreated,
	"UpdateTeam":      TeamUpdated,
	"ChangeTeamQuota": TeamQuotaChanged,
	"DeleteTeam":      TeamDeleted,

	"CreateDepartment": DepartmentCreated,
	"UpdateDepartment": DepartmentUpdated,
	"DeleteDepartment": DepartmentDeleted,

	"CreateMember": MemberCreated,
	"UpdateMember": MemberUpdated,
	"DeleteMember": MemberDeleted,

	"CreateApprovalPolicy": PolicyCreated,
	"UpdateApprovalPolicy": PolicyUpdated,
	"DeleteApprovalPolicy": PolicyDeleted,

	"CreateWebhookSubscription":  WebhookCreated,
	"UpdateWebhookSubscription":  WebhookUpdated,
	"DeleteWebhookSubscription":  WebhookDeleted,
	"RotateWebhookSecret":        WebhookSecretRotated,
	"DisableWebhookSubscription": WebhookDisabled,
}

// phaseActionPrefix: the worker's phase moves are audited as
// "VirtualClusterPhase<Phase>" (VirtualClusterPhaseReady, ...).
const phaseActionPrefix = "VirtualClusterPhase"

// ForAction is the event type an audit action produces, "" for none.
func ForAction(action string) string {
	if t, ok := byAction[action]; ok {
		return t
	}
	if strings.HasPrefix(action, phaseActionPrefix) && len(action) > len(phaseActionPrefix) {
		return VirtualClusterPhaseChanged
	}
	return ""
}

// All is every event type, sorted.
func All() []string {
	seen := map[string]bool{}
	for _, t := range byAction {
		seen[t] = true
	}
	for _, t := range []string{VirtualClusterPhaseChanged, VirtualClusterUpdated} {
		seen[t] = true
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Kind is the object kind of an event type ("request" for "request.approved").
func Kind(typ string) string {
	k, _, _ := strings.Cut(typ, ".")
	return k
}

// ValidPattern checks a subscription filter: an event type, "<kind>.*",
// or "*" for everything.
func ValidPattern(p string) error {
	if p == "*" {
		return nil
	}
	if kind, ok := strings.CutSuffix(p, ".*"); ok {
		for _, t := range All() {
			if Kind(t) == kind {
				return nil
			}
		}
		return fmt.Errorf("%q names no kind of event (kinds: %s)", p, strings.Join(kinds(), ", "))
	}
	if slices.Contains(All(), p) {
		return nil
	}
	return fmt.Errorf("%q is not an event type (e.g. request.approved, virtualcluster.*; see docs/events.md)", p)
}

// Matches reports whether typ matches any of patterns; no patterns match
// every type.
func Matches(patterns []string, typ string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p == "*" || p == typ {
			return true
		}
		if kind, ok := strings.CutSuffix(p, ".*"); ok && Kind(typ) == kind {
			return true
		}
	}
	return false
}

func kinds() []string {
	var out []string
	for _, t := range All() {
		if k := Kind(t); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
