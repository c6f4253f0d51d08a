package server

import (
	"context"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// gatewayErrorHandler writes every REST error as a google.rpc.Status with
// an ErrorInfo, and speaks JSON to REST callers:
//
//   - a body the gateway cannot decode gets the violations explainDecode
//     found (field by JSON path, what the field takes), never protojson's
//     raw message;
//   - a query parameter that does not parse gets a violation naming it;
//   - field violations from the server, named by proto field path for gRPC
//     callers, are renamed to JSON paths (errs.JSONFieldPath), in the
//     violations and in the message that lists them.
func gatewayErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st, ok := status.FromError(err)
	if ok {
		st = restStatus(ctx, r, st)
		setRetryAfter(w, st)
		err = st.Err()
		if code := httpStatus(st); code != runtime.HTTPStatusFromCode(st.Code()) {
			err = &runtime.HTTPStatusError{HTTPStatus: code, Err: err}
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// queryParseError is how the gateway words a query parameter it cannot
// parse (runtime.PopulateQueryParameters).
var queryParseError = regexp.MustCompile(`^parsing (?:field|list) "([a-z0-9_]+)": (.*)$`)

func restStatus(ctx context.Context, r *http.Request, st *status.Status) *status.Status {
	if st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		violations := decodeViolations(ctx, r)
		msg := "invalid request body"
		if len(violations) == 0 {
			if m := queryParseError.FindStringSubmatch(st.Message()); m != nil {
				violations = []errs.FieldViolation{{Field: m[1], Description: "invalid query parameter value: " + m[2]}}
				msg = "invalid query parameter"
			} else {
				violations = []errs.FieldViolation{{Field: "body", Description: st.Message()}}
			}
		}
		e := &errs.Error{Kind: errs.KindInvalidArgument, Reason: errs.ReasonInvalidField, Message: msg, Violations: violations}
		return withJSONPaths(statusOf(codes.InvalidArgument, e))
	}
	return withJSONPaths(st)
}

// statusOf is a domain error as a status (toStatus without the logging of
// internal errors, which never reach here).
func statusOf(code codes.Code, e *errs.Error) *status.Status {
	st := status.New(code, e.PublicMessage())
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: e.Reason, Domain: ErrorDomain, Metadata: jsonMetadata(e.Metadata)}}
	if len(e.Violations) > 0 {
		br := &errdetails.BadRequest{}
		for _, v := range e.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
		}
		details = append(details, br)
	}
	if e.RetryAfter > 0 {
		details = append(details, retryInfo(e.RetryAfter))
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return withDetails
}

// withJSONPaths renames the field violations of st to JSON paths, and the
// same paths where the message repeats them.
func withJSONPaths(st *status.Status) *status.Status {
	p := st.Proto()
	msg := p.GetMessage()
	changed := false
	for i, d := range p.GetDetails() {
		var br errdetails.BadRequest
		if d.MessageIs(&br) && d.UnmarshalTo(&br) == nil {
			// Longest first, so "quota_budget" does not rename the start of
			// "quota_budget.cpu_millis" in the message before that is found.
			byLength := slices.Clone(br.GetFieldViolations())
			slices.SortStableFunc(byLength, func(a, b *errdetails.BadRequest_FieldViolation) int {
				return len(b.GetField()) - len(a.GetField())
			})
			for _, v := range byLength {
				msg = replaceField(msg, v.GetField(), errs.JSONFieldPath(v.GetField()))
			}
			for _, v := range br.GetFieldViolations() {
				if j := errs.JSONFieldPath(v.GetField()); j != v.GetField() {
					v.Field = j
					changed = true
				}
			}
			if changed {
				if err := p.Details[i].MarshalFrom(&br); err != nil {
					return st
				}
			}
		}
	}
	if !changed {
		return st
	}
	p.Message = msg
	return status.FromProto(p)
}

// replaceField replaces whole occurrences of a field path in a message.
func replaceField(msg, from, to string) string {
	if from == to {
		return msg
	}
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_.])` + regexp.QuoteMeta(from) + `($|[^A-Za-z0-9_])`)
	return re.ReplaceAllString(msg, "${1}"+strings.ReplaceAll(to, "$", "$$")+"${2}")
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
