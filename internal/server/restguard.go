package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// DefaultMaxRequestBytes is the body (REST) and message (gRPC) size limit
// when the configuration names none.
const DefaultMaxRequestBytes = 1 << 20

// ReasonRequestTooLarge is the ErrorInfo reason of a REST body past the
// limit (HTTP 413).
const ReasonRequestTooLarge = "REQUEST_TOO_LARGE"

// guardREST runs before the gateway touches a REST call, so what a caller
// without a valid token can make the server do stays small:
//
//  1. the raw path and query must be UTF-8 without NUL (checkRawRequest);
//  2. the bearer token is verified (the gRPC interceptor verifies it again,
//     from the identity cache) before one byte of the body is read;
//  3. the body is read into memory up to limit bytes and refused with 413
//     past it; a Content-Length above the limit is refused unread.
//
// Errors are written as the gateway writes every error (google.rpc.Status
// JSON through its error handler).
func (s *Server) guardREST(gw *runtime.ServeMux, limit int64, next http.Handler) http.Handler {
	fail := func(w http.ResponseWriter, r *http.Request, err error) {
		_, outbound := runtime.MarshalerForRequest(gw, r)
		runtime.HTTPError(r.Context(), gw, outbound, w, r, err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkRawRequest(r); err != nil {
			fail(w, r, toStatus(r.Context(), s.log, err))
			return
		}
		if _, err := s.authenticateHeader(r.Context(), r.Header.Values("Authorization")); err != nil {
			fail(w, r, toStatus(r.Context(), s.log, err))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			body, err := readCapped(r.Body, r.ContentLength, limit)
			if err != nil {
				if errors.Is(err, errBodyTooLarge) {
					// The rest of the body is not worth reading: close the
					// connection once the answer is out.
					w.Header().Set("Connection", "close")
					fail(w, r, &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge,
						Err: toStatus(r.Context(), s.log, bodyTooLarge(limit))})
					return
				}
				fail(w, r, toStatus(r.Context(), s.log, errs.InvalidField("body", "could not be read: %v", err)))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		next.ServeHTTP(w, r)
	})
}

var errBodyTooLarge = errors.New("request body too large")

// readCapped reads body, which announced length (-1: unknown), and fails
// with errBodyTooLarge as soon as it is known to exceed limit; it never
// holds more than limit+1 bytes.
func readCapped(body io.Reader, length, limit int64) ([]byte, error) {
	if length > limit {
		return nil, errBodyTooLarge
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(max(length, 512), limit+1)))
	n, err := buf.ReadFrom(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, errBodyTooLarge
	}
	return buf.Bytes(), nil
}

func bodyTooLarge(limit int64) error {
	e := errs.InvalidField("body", "must be at most %d bytes (server flag --max-request-bytes)", limit)
	e.Reason = ReasonRequestTooLarge
	e.Message = "request body too large"
	return e.With("limit_bytes", strconv.FormatInt(limit, 10))
}
