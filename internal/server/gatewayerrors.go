package server

import (
	"context"
	"net/http"

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
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}
