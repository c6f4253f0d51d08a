package client

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the ErrorInfo domain of gpuplane's errors.
const ErrorDomain = "gpuplane.dev"

// Error is a gpuplane API error unpacked from its gRPC status.
type Error struct {
	Code    codes.Code
	Message string
	// Reason is the stable ErrorInfo reason (QUOTA_EXCEEDED,
	// ETAG_MISMATCH, NOT_FOUND, ...); empty when the server sent none.
	Reason   string
	Metadata map[string]string
	// Violations are BadRequest field violations, in order.
	Violations []FieldViolation
}

// FieldViolation names one invalid request field.
type FieldViolation struct {
	Field       string
	Description string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Reason != "" {
		fmt.Fprintf(&b, " [%s]", e.Reason)
	}
	return b.String()
}

// AsError unpacks err when it is a gRPC status (from any call of a Client).
func AsError(err error) (*Error, bool) {
	if err == nil {
		return nil, false
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil, false
	}
	st := se.GRPCStatus()
	out := &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			out.Reason, out.Metadata = d.GetReason(), d.GetMetadata()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				out.Violations = append(out.Violations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return out, true
}

// Reason is the ErrorInfo reason of err, or "".
func Reason(err error) string {
	if e, ok := AsError(err); ok {
		return e.Reason
	}
	return ""
}
