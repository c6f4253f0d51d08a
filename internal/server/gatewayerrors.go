package server

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// gatewayErrorHandler gives errors that never reached the gRPC server (a
// body or query string the gateway cannot decode) the same shape as every
// other error: ErrorInfo and a BadRequest violation on "body".
func gatewayErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		if withDetails, derr := st.WithDetails(
			&errdetails.ErrorInfo{Reason: errs.ReasonInvalidField, Domain: ErrorDomain},
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "body", Description: st.Message()}}},
		); derr == nil {
			err = withDetails.Err()
		}
	}
	if ok {
		setRetryAfter(w, st)
		if code := httpStatus(st); code != runtime.HTTPStatusFromCode(st.Code()) {
			err = &runtime.HTTPStatusError{HTTPStatus: code, Err: err}
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// reasonHTTPStatus are the ErrorInfo reasons whose HTTP status differs
// from the gateway's mapping of their gRPC code.
var reasonHTTPStatus = map[string]int{
	// A watch position out of retention: re-list, like Kubernetes' 410.
	errs.ReasonEventsExpired: http.StatusGone,
}

// httpStatus is the HTTP status of an error status.
func httpStatus(st *status.Status) int {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			if code, ok := reasonHTTPStatus[ei.GetReason()]; ok {
				return code
			}
		}
	}
	return runtime.HTTPStatusFromCode(st.Code())
}

// setRetryAfter mirrors a RetryInfo detail as the Retry-After header (whole
// seconds, rounded up), which HTTP clients and proxies understand.
func setRetryAfter(w http.ResponseWriter, st *status.Status) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			delay := ri.GetRetryDelay().AsDuration()
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(delay, time.Second).Seconds()))))
			return
		}
	}
}
