package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The REST gateway calls the unary RPCs in-process: a call through our own
// gRPC port cost REST about 40% of its throughput (issue 15: marshalling
// both ways, HTTP/2 framing and two goroutine hand-offs per call). What a
// REST call passes is kept the same as over the port:
//
//   - the client side: the text check on the request with JSON field names
//     (checkText; the gateway's client interceptor did it before) and the
//     gateway's client span (the same stats handler as the loopback
//     connection's);
//   - the server side: the server's stats handler (its span, a child of
//     the client span through the propagated metadata), the caller's
//     metadata as incoming metadata, a ServerTransportStream for
//     grpc.SetHeader/SendHeader/SetTrailer, and the very interceptor chain
//     the gRPC server runs (Server.unary), around the handler of the
//     service registered on the gRPC server.
//
// The gRPC server's MaxRecvMsgSize does not apply: guardREST caps the REST
// body at the same limit before the gateway decodes anything.
//
// Nothing reads the caller's peer (peer.FromContext), so none is set: an
// in-process call has no network address. Messages are copied
// (proto.Merge), never shared, in both directions, as marshalling did.
//
// Streams (the :watch routes) still use the loopback connection: they are
// long-lived, so the hop costs nothing that matters, and an in-process
// ServerStream would be a second transport to keep right.

// inProcessMethod is one unary method of a registered service.
type inProcessMethod struct {
	impl    any
	handler grpc.MethodHandler
}

// inProcessConn is the gateway's grpc.ClientConnInterface.
type inProcessConn struct {
	log *slog.Logger
	// methods by full method name ("/pkg.Service/Method"); filled while
	// New registers the services, read-only afterwards.
	methods     map[string]inProcessMethod
	unary       grpc.UnaryServerInterceptor
	clientStats stats.Handler
	serverStats stats.Handler
	// loopback is the connection to our own gRPC port, for streams.
	loopback grpc.ClientConnInterface
	gate     callGate
}

var _ grpc.ClientConnInterface = (*inProcessConn)(nil)

// serviceRegistrar registers a service on the gRPC server and its unary
// methods for in-process calls, so both serve the same implementation.
type serviceRegistrar struct {
	grpc *grpc.Server
	conn *inProcessConn
}

func (r serviceRegistrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	r.grpc.RegisterService(desc, impl)
	for _, m := range desc.Methods {
		r.conn.methods["/"+desc.ServiceName+"/"+m.MethodName] = inProcessMethod{impl: impl, handler: m.Handler}
	}
}

// Invoke runs one unary call in-process.
func (c *inProcessConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) (err error) {
	req, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return status.Errorf(codes.Internal, "in-process call %s: %T and %T are not protobuf messages", method, args, reply)
	}
	// REST callers know fields by their JSON names, so the check runs here
	// (with those names) and the server chain skips it (textChecked).
	// Before the client span, as the gateway's client interceptor did it.
	if err := checkText(req, true); err != nil {
		return toStatus(ctx, c.log, err)
	}
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	begin := time.Now()
	if c.clientStats != nil {
		ctx = c.clientStats.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method, FailFast: true})
		c.clientStats.HandleRPC(ctx, &stats.Begin{Client: true, BeginTime: begin})
		defer func() {
			c.clientStats.HandleRPC(ctx, &stats.End{Client: true, BeginTime: begin, EndTime: time.Now(), Error: err})
		}()
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}

	sctx, leave, ok := c.gate.enter(ctx)
	if !ok {
		return status.Error(codes.Unavailable, "the server is shutting down")
	}
	defer leave()
	// The caller's outgoing metadata (the gateway's: authorization, the
	// request id, the propagated trace) becomes the handler's
	// incoming metadata; nothing of it stays outgoing, so a handler cannot
	// pass the caller's token on by accident.
	md, _ := metadata.FromOutgoingContext(sctx)
	sctx = metadata.NewIncomingContext(metadata.NewOutgoingContext(sctx, nil), md)
	serverBegin := time.Now()
	if c.serverStats != nil {
		sctx = c.serverStats.TagRPC(sctx, &stats.RPCTagInfo{FullMethodName: method})
		c.serverStats.HandleRPC(sctx, &stats.Begin{BeginTime: serverBegin})
	}
	stream := &inProcessStream{method: method}
	sctx = grpc.NewContextWithServerTransportStream(sctx, stream)

	dec := func(v any) error {
		in, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "in-process call %s: request %T is not a protobuf message", method, v)
		}
		proto.Merge(in, req)
		return nil
	}
	resp, err := m.handler(m.impl, sctx, dec, c.unary)
	if err != nil {
		// As the gRPC server answers an error that is no status.
		if _, ok := status.FromError(err); !ok {
			err = status.FromContextError(err).Err()
		}
	} else if r, ok := resp.(proto.Message); !ok || r == nil {
		err = status.Errorf(codes.Internal, "in-process call %s: the handler returned no response", method)
	}
	if c.serverStats != nil {
		c.serverStats.HandleRPC(sctx, &stats.End{BeginTime: serverBegin, EndTime: time.Now(), Error: err})
	}
	header, trailer := stream.done()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = trailer
		}
	}
	if err != nil {
		return err
	}
	proto.Reset(out)
	proto.Merge(out, resp.(proto.Message))
	return nil
}

// NewStream opens streams over the loopback connection (see above).
func (c *inProcessConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.loopback.NewStream(ctx, desc, method, opts...)
}

// inProcessStream is the grpc.ServerTransportStream of an in-process call:
// it collects the header and trailer the handler and interceptors set.
type inProcessStream struct {
	method string

	mu              sync.Mutex
	header, trailer metadata.MD
	headerSent      bool
	finished        bool
}

func (s *inProcessStream) Method() string { return s.method }

// appendMD adds md to *dst with lower-case keys, as the wire would deliver
// them.
func appendMD(dst *metadata.MD, md metadata.MD) {
	if *dst == nil {
		*dst = make(metadata.MD, len(md))
	}
	for k, vals := range md {
		k = strings.ToLower(k)
		(*dst)[k] = append((*dst)[k], vals...)
	}
}

func (s *inProcessStream) SetHeader(md metadata.MD) error { return s.addHeader(md, false) }

func (s *inProcessStream) SendHeader(md metadata.MD) error { return s.addHeader(md, true) }

// addHeader adds md to the header until it is sent (send: now).
func (s *inProcessStream) addHeader(md metadata.MD, send bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headerSent || s.finished {
		return status.Error(codes.Internal, "transport: the header was already sent")
	}
	appendMD(&s.header, md)
	s.headerSent = send
	return nil
}

func (s *inProcessStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return status.Error(codes.Internal, "transport: the call has finished")
	}
	appendMD(&s.trailer, md)
	return nil
}

// done ends the call: what a goroutine the handler left behind sets from
// now on is refused, as on a finished gRPC stream.
func (s *inProcessStream) done() (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	return s.header, s.trailer
}

// callGate tracks the in-process calls in flight, for Shutdown: once
// closed it refuses new calls (UNAVAILABLE, as a stopped gRPC server
// would), waits for those in flight, and cancels them when the shutdown
// deadline passes (as Stop cuts off calls on connections).
type callGate struct {
	mu     sync.Mutex
	closed bool
	calls  map[*gateCall]struct{}
	idle   chan struct{} // closed when the last call leaves a closed gate
}

type gateCall struct{ cancel context.CancelCauseFunc }

var errServerStopped = status.Error(codes.Unavailable, "the server stopped before the call finished")

// enter admits a call: ctx gets a cancellation of its own, and leave must
// be called when the call ends.
func (g *callGate) enter(ctx context.Context) (_ context.Context, leave func(), ok bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	call := &gateCall{cancel: cancel}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		cancel(nil)
		return nil, nil, false
	}
	if g.calls == nil {
		g.calls = map[*gateCall]struct{}{}
	}
	g.calls[call] = struct{}{}
	g.mu.Unlock()
	return ctx, func() {
		cancel(nil)
		g.mu.Lock()
		delete(g.calls, call)
		if g.closed && len(g.calls) == 0 && g.idle != nil {
			close(g.idle)
			g.idle = nil
		}
		g.mu.Unlock()
	}, true
}

// close refuses new calls and waits for those in flight until ctx ends;
// then it cancels them and returns ctx's error.
func (g *callGate) close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	if len(g.calls) == 0 {
		g.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	g.idle = idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	for call := range g.calls {
		call.cancel(errServerStopped)
	}
	g.mu.Unlock()
	return fmt.Errorf("in-process calls still running: %w", ctx.Err())
}
