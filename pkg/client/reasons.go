package client

import (
	"google.golang.org/grpc/codes"
)

// ErrorInfo reasons gpuplane sends (domain ErrorDomain). They are stable:
// branch on them, not on messages. The server's list is in
// internal/errs; docs/api-conventions.md explains them.
const (
	ReasonInvalidField                = "INVALID_FIELD"
	ReasonNotFound                    = "NOT_FOUND"
	ReasonAlreadyExists               = "ALREADY_EXISTS"
	ReasonEtagMismatch                = "ETAG_MISMATCH"
	ReasonPermissionDenied            = "PERMISSION_DENIED"
	ReasonUnauthenticated             = "UNAUTHENTICATED"
	ReasonQuotaExceeded               = "QUOTA_EXCEEDED"
	ReasonBelowAllocation             = "BELOW_ALLOCATION"
	ReasonInvalidStateTransition      = "INVALID_STATE_TRANSITION"
	ReasonHasDependents               = "HAS_DEPENDENTS"
	ReasonRequestIDReused             = "REQUEST_ID_REUSED"
	ReasonInvalidPageToken            = "INVALID_PAGE_TOKEN"
	ReasonInvalidFilter               = "INVALID_FILTER"
	ReasonIsolationTierViolation      = "ISOLATION_TIER_VIOLATION"
	ReasonInvalidPolicy               = "INVALID_POLICY"
	ReasonSchemaBehind                = "SCHEMA_BEHIND"
	ReasonInternal                    = "INTERNAL"
	ReasonIdentityProviderUnavailable = "IDENTITY_PROVIDER_UNAVAILABLE"
	ReasonRouteNotFound               = "ROUTE_NOT_FOUND"
	ReasonMethodNotAllowed            = "METHOD_NOT_ALLOWED"
	ReasonTooManyWatches              = "TOO_MANY_WATCHES"
	ReasonShuttingDown                = "SHUTTING_DOWN"
	ReasonTokenExpired                = "TOKEN_EXPIRED"
	ReasonUnsafeURL                   = "UNSAFE_URL"
	ReasonRequesterCannotDecide       = "REQUESTER_CANNOT_DECIDE"
	ReasonRequestTooLarge             = "REQUEST_TOO_LARGE"
	ReasonDatabaseUnavailable         = "DATABASE_UNAVAILABLE"
	ReasonParentNotFound              = "PARENT_NOT_FOUND"
	ReasonConcurrencyConflict         = "CONCURRENCY_CONFLICT"
	ReasonNoHostCluster               = "NO_HOST_CLUSTER"
	ReasonVirtualClusterNotReady      = "VIRTUAL_CLUSTER_NOT_READY"
	ReasonKubeconfigUnavailable       = "KUBECONFIG_UNAVAILABLE"
	// ReasonEventsExpired is in watch.go.
)

// Reasons lists every reason above (a test keeps it equal to the server's).
var Reasons = []string{
	ReasonInvalidField, ReasonNotFound, ReasonAlreadyExists, ReasonEtagMismatch,
	ReasonPermissionDenied, ReasonUnauthenticated, ReasonQuotaExceeded, ReasonBelowAllocation,
	ReasonInvalidStateTransition, ReasonHasDependents, ReasonRequestIDReused, ReasonInvalidPageToken,
	ReasonInvalidFilter, ReasonIsolationTierViolation, ReasonInvalidPolicy, ReasonSchemaBehind,
	ReasonInternal, ReasonIdentityProviderUnavailable, ReasonRouteNotFound, ReasonMethodNotAllowed,
	ReasonEventsExpired, ReasonTooManyWatches, ReasonShuttingDown, ReasonTokenExpired, ReasonUnsafeURL,
	ReasonRequesterCannotDecide, ReasonRequestTooLarge, ReasonDatabaseUnavailable, ReasonParentNotFound,
	ReasonConcurrencyConflict, ReasonNoHostCluster, ReasonVirtualClusterNotReady, ReasonKubeconfigUnavailable,
}

// Code is the gRPC code of err (codes.OK for nil, codes.Unknown for an
// error that is no status).
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if e, ok := AsError(err); ok {
		return e.Code
	}
	return codes.Unknown
}

// HasReason reports whether err is a gpuplane error with this ErrorInfo
// reason.
func HasReason(err error, reason string) bool { return err != nil && Reason(err) == reason }

// IsNotFound reports whether err says: the object does not exist, or the caller may not see it
// (gpuplane answers both alike so as not to reveal other teams' objects).
func IsNotFound(err error) bool { return Code(err) == codes.NotFound }

// IsAlreadyExists reports whether err says: an object with that id exists.
func IsAlreadyExists(err error) bool { return Code(err) == codes.AlreadyExists }

// IsInvalidArgument reports whether err says: the request is malformed; Error.Violations name the
// fields.
func IsInvalidArgument(err error) bool { return Code(err) == codes.InvalidArgument }

// IsPermissionDenied reports whether err says: the caller may see the object but not change it.
func IsPermissionDenied(err error) bool { return Code(err) == codes.PermissionDenied }

// IsUnauthenticated reports whether err says: no token, or one the server does not accept.
func IsUnauthenticated(err error) bool { return Code(err) == codes.Unauthenticated }

// IsQuotaExceeded reports whether err says: the ask does not fit a team's, department's or node
// pool's quota; Error.Metadata says where and by how much.
func IsQuotaExceeded(err error) bool { return HasReason(err, ReasonQuotaExceeded) }

// IsEtagMismatch reports whether err says: the object changed since it was read; read it again.
func IsEtagMismatch(err error) bool { return HasReason(err, ReasonEtagMismatch) }

// IsInvalidStateTransition reports whether err says: the request is no longer in a state that
// allows the call (approving a cancelled request, ...).
func IsInvalidStateTransition(err error) bool { return HasReason(err, ReasonInvalidStateTransition) }

// IsUnavailable reports whether err says: the server (or its database or identity provider) is
// unavailable for now; retry later (Error carries a RetryInfo delay when
// the server knows one).
func IsUnavailable(err error) bool { return Code(err) == codes.Unavailable }
