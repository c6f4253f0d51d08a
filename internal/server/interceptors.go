package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/reqctx"
)

// RequestIDHeader carries the server-assigned (or caller-supplied) id of one
// API call; it appears in logs, audit events (as the correlation id, through
// reqctx) and the response headers.
const RequestIDHeader = "x-request-id"

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validRequestID accepts caller ids that are safe to log and echo.
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// Authenticator turns a bearer token into a principal.
type Authenticator interface {
	Verify(ctx context.Context, rawToken string) (identity.Principal, error)
}

// unauthenticatedMethods need no token: health checks and reflection.
func unauthenticatedMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

type metrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_grpc_server_handled_total",
			Help: "RPCs completed on the server, by method and gRPC code (REST calls included: the gateway calls gRPC).",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuplane_grpc_server_handling_seconds",
			Help:    "Time to handle an RPC, by method and gRPC code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method", "code"}),
	}
	reg.MustRegister(m.handled, m.duration)
	return m
}

// unaryChain is the one interceptor every call passes, gRPC and REST alike:
// request id -> recovery -> authentication -> handler, with logging and
// metrics around it and domain errors mapped to statuses on the way out.
// streamChain (stream.go) does the same for streaming calls.
func (s *Server) unaryChain(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	ctx, c := s.begin(ctx, info.FullMethod)
	defer c.end(ctx, &err)
	if ctx, err = c.authenticate(ctx); err != nil {
		return nil, err
	}
	if m, ok := req.(proto.Message); ok && !textChecked(ctx) {
		if err := checkText(m, false); err != nil { // textcheck.go
			return nil, c.status(ctx, err)
		}
	}
	resp, err = handler(ctx, req)
	return resp, c.status(ctx, c.s.classify(err))
}

// textChecked: an in-process call, whose request passed checkText before
// it entered the chain (inProcessConn.Invoke).
func textChecked(ctx context.Context) bool {
	_, ok := grpc.ServerTransportStreamFromContext(ctx).(*inProcessStream)
	return ok
}

// call is one RPC on its way through the interceptors.
type call struct {
	s      *Server
	method string
	start  time.Time
	reqID  string
	// subject is the authenticated caller's, once known.
	subject string
	// log is built on first use (logger): most calls log nothing at the
	// levels enabled, and a logger with attributes costs allocations.
	log *slog.Logger
}

// logger is the call's logger, with its request id, method and subject.
func (c *call) logger() *slog.Logger {
	if c.log == nil {
		c.log = c.s.log.With("request_id", c.reqID, "method", c.method)
		if c.subject != "" {
			c.log = c.log.With("subject", c.subject)
		}
	}
	return c.log
}

// status maps err (nil stays nil) to the call's gRPC status.
func (c *call) status(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return toStatus(ctx, c.logger(), err)
}

// begin assigns the request id (the caller's, when valid) and sends it back.
func (s *Server) begin(ctx context.Context, method string) (context.Context, *call) {
	c := &call{s: s, method: method, start: time.Now()}
	reqID := ""
	// ValueFromIncomingContext reads one key without copying the map.
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDHeader); len(v) > 0 && validRequestID(v[0]) {
		reqID = v[0]
	} else {
		reqID = newRequestID()
	}
	ctx = reqctx.WithCorrelationID(ctx, reqID)
	_ = grpc.SetHeader(ctx, metadata.Pairs(RequestIDHeader, reqID))
	c.reqID = reqID
	return ctx, c
}

// authenticate puts the caller's principal into ctx (not for health
// checks and reflection).
func (c *call) authenticate(ctx context.Context) (context.Context, error) {
	if unauthenticatedMethod(c.method) {
		return ctx, nil
	}
	p, err := c.s.authenticate(ctx)
	if err != nil {
		return ctx, c.status(ctx, err)
	}
	c.subject, c.log = p.Subject, nil
	return reqctx.WithPrincipal(ctx, p), nil
}

// end recovers a panic and records the call's outcome; it must be
// deferred directly.
func (c *call) end(ctx context.Context, errp *error) {
	if p := recover(); p != nil {
		c.logger().ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		*errp = status.Error(codes.Internal, "internal error")
	}
	code := status.Code(*errp)
	elapsed := time.Since(c.start)
	c.s.metrics.handled.WithLabelValues(c.method, code.String()).Inc()
	c.s.metrics.duration.WithLabelValues(c.method, code.String()).Observe(elapsed.Seconds())
	level := slog.LevelDebug
	if code == codes.Internal || code == codes.Unknown {
		level = slog.LevelError
	}
	if c.s.log.Enabled(ctx, level) {
		c.logger().Log(ctx, level, "rpc", "code", code.String(), "duration_ms", float64(elapsed.Microseconds())/1000)
	}
}

func (s *Server) authenticate(ctx context.Context) (identity.Principal, error) {
	return s.authenticateHeader(ctx, metadata.ValueFromIncomingContext(ctx, "authorization"))
}

// authenticateHeader verifies the bearer token among the authorization
// header values vals.
func (s *Server) authenticateHeader(ctx context.Context, vals []string) (identity.Principal, error) {
	if len(vals) == 0 {
		return identity.Principal{}, errs.New(errs.KindUnauthenticated, errs.ReasonUnauthenticated,
			"missing bearer token: send 'Authorization: Bearer <OIDC ID token>'")
	}
	raw, err := identity.BearerToken(vals[0])
	if err != nil {
		return identity.Principal{}, err
	}
	return s.auth.Verify(ctx, raw)
}

// chainUnary composes interceptors into one, the first outermost.
func chainUnary(first grpc.UnaryServerInterceptor, rest ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(rest) == 0 {
		return first
	}
	inner := chainUnary(rest[0], rest[1:]...)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return first(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return inner(ctx, req, info, handler)
		})
	}
}
