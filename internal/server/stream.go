package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Streaming calls (Watch) pass the same chain as unary ones: request id,
// recovery, authentication, logging, metrics and the one error mapping.

// streamChain is unaryChain for server streams.
func (s *Server) streamChain(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	ctx, c := s.begin(ss.Context(), info.FullMethod)
	defer c.end(ctx, &err)
	if ctx, err = c.authenticate(ctx); err != nil {
		return err
	}
	annotate(ctx)
	err = handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
	return c.status(ctx, s.classify(err))
}

// contextStream carries the chain's context (principal, request id) to
// the handler, and gives received messages the same text check as unary
// requests (textcheck.go).
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

func (s *contextStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		return checkText(pm, false)
	}
	return nil
}

// isStreamRoute: the REST routes of server-streaming RPCs (the ":watch"
// custom methods).
func isStreamRoute(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/") && strings.HasSuffix(r.URL.Path, ":watch")
}

// withStreams prepares REST calls of streaming RPCs, which may last hours:
// the server's read and write timeouts (meant for ordinary calls) are
// lifted for them, and an error the stream fails with before its first
// message gets the HTTP status the one error mapping gives it (httpStatus:
// 410 for an expired watch position) rather than the gateway's default.
// It must wrap the server's own ResponseWriter (outermost).
func withStreams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isStreamRoute(r) {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		holder := &streamFailure{}
		next.ServeHTTP(&streamWriter{ResponseWriter: w, failure: holder},
			r.WithContext(context.WithValue(r.Context(), streamFailureKey{}, holder)))
	})
}

type streamFailureKey struct{}

// streamFailure holds the status a stream failed with (streamErrorHandler
// records it just before the gateway writes the response header).
type streamFailure struct{ st *status.Status }

// streamErrorHandler is the gateway's stream error handler: the status as
// gRPC returned it, remembered for streamWriter.
func streamErrorHandler(ctx context.Context, err error) *status.Status {
	st := status.Convert(err)
	if h, ok := ctx.Value(streamFailureKey{}).(*streamFailure); ok {
		h.st = st
	}
	return st
}

var _ runtime.StreamErrorHandlerFunc = streamErrorHandler

// streamWriter replaces the status of a stream that failed before it sent
// anything.
type streamWriter struct {
	http.ResponseWriter
	failure *streamFailure
}

func (w *streamWriter) WriteHeader(code int) {
	if code >= 400 && w.failure.st != nil {
		code = httpStatus(w.failure.st)
		setRetryAfter(w.ResponseWriter, w.failure.st)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *streamWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
