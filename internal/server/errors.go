package server

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// ErrorDomain is the ErrorInfo.domain of every error the API returns.
const ErrorDomain = "gpuplane.dev"

var kindCodes = map[errs.Kind]codes.Code{
	errs.KindInvalidArgument:    codes.InvalidArgument,
	errs.KindNotFound:           codes.NotFound,
	errs.KindAlreadyExists:      codes.AlreadyExists,
	errs.KindPermissionDenied:   codes.PermissionDenied,
	errs.KindUnauthenticated:    codes.Unauthenticated,
	errs.KindFailedPrecondition: codes.FailedPrecondition,
	errs.KindAborted:            codes.Aborted,
	errs.KindUnavailable:        codes.Unavailable,
	errs.KindResourceExhausted:  codes.ResourceExhausted,
	errs.KindOutOfRange:         codes.OutOfRange,
}

// toStatus is the one place domain errors become gRPC statuses. Errors that
// are not domain errors are internal: their text is logged, never returned,
// because it may carry SQL or infrastructure details.
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	e, ok := errs.As(err)
	code, known := codes.Internal, false
	if ok {
		code, known = kindCodes[e.Kind]
	}
	if !known {
		log.ErrorContext(ctx, "internal error", "error", err)
		st, _ := status.New(codes.Internal, "internal error; the x-request-id response header identifies it in the server logs").
			WithDetails(&errdetails.ErrorInfo{Reason: errs.ReasonInternal, Domain: ErrorDomain})
		return st.Err()
	}
	st := status.New(code, e.PublicMessage())
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: e.Reason, Domain: ErrorDomain, Metadata: e.Metadata}}
	if len(e.Violations) > 0 {
		br := &errdetails.BadRequest{}
		for _, v := range e.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
		}
		details = append(details, br)
	}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	withDetails, derr := st.WithDetails(details...)
	if derr != nil {
		return st.Err()
	}
	return withDetails.Err()
}
