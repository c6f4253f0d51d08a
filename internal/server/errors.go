package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	return statusOf(code, e).Err()
}

// jsonMetadata names ErrorInfo metadata keys in lowerCamelCase, as AIP-193
// asks ("virtualClusters", not "virtual_clusters"); the domain writes them
// like field names.
func jsonMetadata(md map[string]string) map[string]string {
	if len(md) == 0 {
		return md
	}
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[errs.JSONFieldPath(k)] = v
	}
	return out
}

func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}
