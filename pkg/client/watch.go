package client

import (
	"context"
	"iter"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// ReasonEventsExpired is the reason of the error a watch ends with when
// its resume position is older than the server's event retention: list
// the objects again and watch from the position that answer gives (or
// start a watch without a position: it begins with the current state).
const ReasonEventsExpired = "EVENTS_EXPIRED"

// WatchOption tunes WatchVirtualClusters and WatchRequests.
type WatchOption func(*watchConfig)

type watchConfig struct {
	idle       time.Duration
	maxBackoff time.Duration
	heartbeats bool
}

// WithIdleTimeout reconnects when nothing (not even a heartbeat) arrived
// for d (default 1 minute; servers send heartbeats every 15s by default),
// e.g. after a proxy silently dropped the connection.
func WithIdleTimeout(d time.Duration) WatchOption { return func(c *watchConfig) { c.idle = d } }

// WithMaxRetryDelay bounds the delay between reconnection attempts
// (default 30s; the delay starts at 100ms and doubles).
func WithMaxRetryDelay(d time.Duration) WatchOption { return func(c *watchConfig) { c.maxBackoff = d } }

// WithHeartbeats also yields HEARTBEAT events (each carries the position
// the watch has reached); by default they are consumed silently.
func WithHeartbeats() WatchOption { return func(c *watchConfig) { c.heartbeats = true } }

// WatchVirtualClusters streams the virtual clusters req selects: the
// current ones (EXISTING, then SYNCED) unless req.ResumePosition is set,
// then every change (CHANGED). It reconnects by itself when the connection
// or the server goes away, resuming after the last position it yielded, so
// the caller sees every change once and in order; iteration ends with an
// error it cannot recover from (bad request, permission, an expired
// position: see ReasonEventsExpired) or when ctx ends (no error then).
// Reconnecting before the first SYNCED starts over: the EXISTING events
// are sent again.
//
//	for ev, err := range c.WatchVirtualClusters(ctx, &pb.WatchVirtualClustersRequest{Parent: "teams/team-a"}) {
//		if err != nil { return err }
//		fmt.Println(ev.GetKind(), ev.GetVirtualCluster().GetName(), ev.GetVirtualCluster().GetStatus().GetPhase())
//	}
func (c *Client) WatchVirtualClusters(ctx context.Context, req *pb.WatchVirtualClustersRequest, opts ...WatchOption) iter.Seq2[*pb.VirtualClusterEvent, error] {
	api := pb.NewWatchServiceClient(c.Conn)
	return watchSeq(ctx, req.GetResumePosition(), opts, func(ctx context.Context, resume int64) (grpc.ServerStreamingClient[pb.VirtualClusterEvent], error) {
		r := proto.CloneOf(req)
		if r == nil {
			r = &pb.WatchVirtualClustersRequest{}
		}
		r.ResumePosition = resume
		return api.WatchVirtualClusters(ctx, r)
	})
}

// WatchRequests streams the requests req selects, as WatchVirtualClusters
// does virtual clusters.
func (c *Client) WatchRequests(ctx context.Context, req *pb.WatchRequestsRequest, opts ...WatchOption) iter.Seq2[*pb.RequestEvent, error] {
	api := pb.NewWatchServiceClient(c.Conn)
	return watchSeq(ctx, req.GetResumePosition(), opts, func(ctx context.Context, resume int64) (grpc.ServerStreamingClient[pb.RequestEvent], error) {
		r := proto.CloneOf(req)
		if r == nil {
			r = &pb.WatchRequestsRequest{}
		}
		r.ResumePosition = resume
		return api.WatchRequests(ctx, r)
	})
}

type watchEvent interface {
	GetKind() pb.WatchEventKind
	GetPosition() int64
}

func watchSeq[E any, P interface {
	*E
	watchEvent
}](ctx context.Context, resume int64, opts []WatchOption,
	open func(ctx context.Context, resume int64) (grpc.ServerStreamingClient[E], error)) iter.Seq2[*E, error] {
	cfg := watchConfig{idle: time.Minute, maxBackoff: 30 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	return func(yield func(*E, error) bool) {
		failures := 0
		for ctx.Err() == nil {
			progressed, stop, err := watchOnce[E, P](ctx, &resume, cfg, open, yield)
			if stop {
				return
			}
			if ctx.Err() != nil {
				return
			}
			if !retryableWatchError(err) {
				yield(nil, err)
				return
			}
			if progressed {
				failures = 0
			}
			failures++
			d := min(100*time.Millisecond<<min(failures-1, 16), cfg.maxBackoff)
			t := time.NewTimer(d/2 + rand.N(d/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// watchOnce runs one stream; stop: the consumer stopped iterating.
func watchOnce[E any, P interface {
	*E
	watchEvent
}](ctx context.Context, resume *int64, cfg watchConfig,
	open func(ctx context.Context, resume int64) (grpc.ServerStreamingClient[E], error), yield func(*E, error) bool) (progressed, stop bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := open(sctx, *resume)
	if err != nil {
		return false, false, err
	}
	idle := time.AfterFunc(cfg.idle, cancel)
	defer idle.Stop()
	for {
		ev, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil && sctx.Err() != nil {
				err = status.Error(codes.Unavailable, "watch: nothing received for "+cfg.idle.String()+"; reconnecting")
			}
			return progressed, false, err
		}
		idle.Reset(cfg.idle)
		progressed = true
		e := P(ev)
		switch e.GetKind() {
		case pb.WatchEventKind_SYNCED, pb.WatchEventKind_CHANGED:
			*resume = e.GetPosition()
		case pb.WatchEventKind_HEARTBEAT:
			*resume = max(*resume, e.GetPosition())
			if !cfg.heartbeats {
				continue
			}
		}
		if !yield(ev, nil) {
			return progressed, true, nil
		}
	}
}

// retryableWatchError: the stream ended for a reason a reconnect cures.
func retryableWatchError(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Internal:
		// Internal: e.g. a proxy reset the HTTP/2 stream.
		return true
	case codes.Unauthenticated:
		// The token expired during the watch: the next call asks the
		// token source for a fresh one.
		return Reason(err) == ReasonTokenExpired
	}
	return false
}
