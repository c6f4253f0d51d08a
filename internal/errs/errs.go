// Package errs is the domain error vocabulary. Domain packages return these;
// internal/server is the one place that turns them into gRPC statuses with
// ErrorInfo and BadRequest details. Nothing here imports gRPC.
package errs

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Kind says what went wrong in terms a caller can act on. It maps 1:1 to a
// gRPC code in internal/server.
type Kind int

// Kinds.
const (
	KindUnknown Kind = iota
	KindInvalidArgument
	KindNotFound
	KindAlreadyExists
	KindPermissionDenied
	KindUnauthenticated
	KindFailedPrecondition
	KindAborted // optimistic concurrency (stale etag)
	KindUnavailable
	KindResourceExhausted
	// KindOutOfRange: a position outside what the server holds (a watch
	// resumed after its events fell out of retention).
	KindOutOfRange
)

func (k Kind) String() string {
	switch k {
	case KindInvalidArgument:
		return "invalid argument"
	case KindNotFound:
		return "not found"
	case KindAlreadyExists:
		return "already exists"
	case KindPermissionDenied:
		return "permission denied"
	case KindUnauthenticated:
		return "unauthenticated"
	case KindFailedPrecondition:
		return "failed precondition"
	case KindAborted:
		return "aborted"
	case KindUnavailable:
		return "unavailable"
	case KindResourceExhausted:
		return "resource exhausted"
	case KindOutOfRange:
		return "out of range"
	}
	return "unknown"
}

// Stable machine-readable reasons carried in google.rpc.ErrorInfo.reason.
const (
	ReasonInvalidField      = "INVALID_FIELD"
	ReasonNotFound          = "NOT_FOUND"
	ReasonAlreadyExists     = "ALREADY_EXISTS"
	ReasonEtagMismatch      = "ETAG_MISMATCH"
	ReasonPermissionDenied  = "PERMISSION_DENIED"
	ReasonUnauthenticated   = "UNAUTHENTICATED"
	ReasonQuotaExceeded     = "QUOTA_EXCEEDED"
	ReasonBelowAllocation   = "BELOW_ALLOCATION"
	ReasonInvalidTransition = "INVALID_STATE_TRANSITION"
	ReasonHasChildren       = "HAS_DEPENDENTS"
	ReasonRequestIDReused   = "REQUEST_ID_REUSED"
	ReasonInvalidPageToken  = "INVALID_PAGE_TOKEN"
	ReasonInvalidFilter     = "INVALID_FILTER"
	ReasonTierViolation     = "ISOLATION_TIER_VIOLATION"
	ReasonInvalidPolicy     = "INVALID_POLICY"
	ReasonSchemaBehind      = "SCHEMA_BEHIND"
	ReasonInternal          = "INTERNAL"
	// ReasonRequesterCannotDecide: separation of duties; the caller asked
	// for the request and its department keeps requesters from deciding.
	ReasonRequesterCannotDecide = "REQUESTER_CANNOT_DECIDE"
	// ReasonIdentityProviderUnavailable: the token names a signing key we
	// do not have and the identity provider cannot be asked for it now.
	ReasonIdentityProviderUnavailable = "IDENTITY_PROVIDER_UNAVAILABLE"
	// ReasonRouteNotFound: no REST route matches the URL (a mistyped path),
	// as opposed to NOT_FOUND for an object.
	ReasonRouteNotFound = "ROUTE_NOT_FOUND"
	// ReasonMethodNotAllowed: the REST route exists under other HTTP
	// methods (HTTP 405 with Allow).
	ReasonMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// ReasonEventsExpired: a watch's resume position is no longer (or not)
	// in the event feed; list again (HTTP 410 Gone, like Kubernetes).
	ReasonEventsExpired = "EVENTS_EXPIRED"
	// ReasonTooManyWatches: the caller has the most open watches allowed.
	ReasonTooManyWatches = "TOO_MANY_WATCHES"
	// ReasonShuttingDown: the server is stopping; retry (watches resume).
	ReasonShuttingDown = "SHUTTING_DOWN"
	// ReasonTokenExpired: a long-lived call (a watch) outlived the caller's
	// token; call again with a fresh one.
	ReasonTokenExpired = "TOKEN_EXPIRED"
	// ReasonUnsafeURL: a webhook URL is refused (scheme, or an address in a
	// private, loopback, link-local or metadata range).
	ReasonUnsafeURL = "UNSAFE_URL"
)

// FieldViolation names one bad field, using the proto field path
// (e.g. "department.quota_budget.gpu"); REST callers see the JSON path
// (JSONFieldPath).
type FieldViolation struct {
	Field       string
	Description string
}

// Error is a domain error.
type Error struct {
	Kind       Kind
	Reason     string
	Message    string
	Metadata   map[string]string
	Violations []FieldViolation
	// RetryAfter, when positive, tells the caller when a retry may succeed
	// (google.rpc.RetryInfo; Retry-After over HTTP).
	RetryAfter time.Duration
	cause      error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	for i, v := range e.Violations {
		if i == 0 && e.Message != "" {
			b.WriteString(": ")
		} else if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", v.Field, v.Description)
	}
	if e.cause != nil {
		fmt.Fprintf(&b, ": %v", e.cause)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.cause }

// New builds an error of the given kind and reason.
func New(kind Kind, reason, format string, args ...any) *Error {
	return &Error{Kind: kind, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Wrap keeps cause for logs; the cause text is not shown to callers.
func Wrap(cause error, kind Kind, reason, format string, args ...any) *Error {
	e := New(kind, reason, format, args...)
	e.cause = cause
	return e
}

// With adds ErrorInfo metadata and returns e for chaining.
func (e *Error) With(key, value string) *Error {
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	e.Metadata[key] = value
	return e
}

// WithRetryAfter sets RetryAfter and returns e for chaining.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

// PublicMessage is the text shown to callers (no wrapped cause).
func (e *Error) PublicMessage() string {
	c := *e
	c.cause = nil
	return c.Error()
}

// SortedMetadataKeys is a helper for deterministic rendering.
func (e *Error) SortedMetadataKeys() []string {
	keys := make([]string, 0, len(e.Metadata))
	for k := range e.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NotFound says resource does not exist (or the caller may not see it).
func NotFound(resource string) *Error {
	return New(KindNotFound, ReasonNotFound, "%s not found", resource).With("resource", resource)
}

// AlreadyExists says resource exists already.
func AlreadyExists(resource string) *Error {
	return New(KindAlreadyExists, ReasonAlreadyExists, "%s already exists", resource).With("resource", resource)
}

// PermissionDenied says the caller may see but not do this.
func PermissionDenied(format string, args ...any) *Error {
	return New(KindPermissionDenied, ReasonPermissionDenied, format, args...)
}

// EtagMismatch says resource changed since the caller read it.
func EtagMismatch(resource string) *Error {
	return New(KindAborted, ReasonEtagMismatch,
		"%s was changed by someone else (etag mismatch); read it again and retry", resource).With("resource", resource)
}

// FailedPrecondition says the system is not in a state that allows this.
func FailedPrecondition(reason, format string, args ...any) *Error {
	return New(KindFailedPrecondition, reason, format, args...)
}

// Violations collects field violations; Err returns nil when there are none.
type Violations []FieldViolation

// Add records a violation on field.
func (v *Violations) Add(field, format string, args ...any) {
	*v = append(*v, FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// Merge appends others with a field prefix (e.g. "team.").
func (v *Violations) Merge(prefix string, others Violations) {
	for _, o := range others {
		*v = append(*v, FieldViolation{Field: prefix + o.Field, Description: o.Description})
	}
}

// Err is an INVALID_ARGUMENT error carrying v, or nil when v is empty.
func (v Violations) Err() error {
	if len(v) == 0 {
		return nil
	}
	return v.invalid()
}

func (v Violations) invalid() *Error {
	return &Error{Kind: KindInvalidArgument, Reason: ReasonInvalidField, Message: "invalid request", Violations: v}
}

// InvalidField is a one-violation shortcut.
func InvalidField(field, format string, args ...any) *Error {
	var v Violations
	v.Add(field, format, args...)
	return v.invalid()
}

// As extracts a *Error from err.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// KindOf returns the kind of err, KindUnknown for foreign errors.
func KindOf(err error) Kind {
	if e, ok := As(err); ok {
		return e.Kind
	}
	return KindUnknown
}
