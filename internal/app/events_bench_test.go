package app_test

// Benchmarks of the change feed (issue 13): latency from a commit to a
// watcher seeing the event and to a webhook receiver getting it, and the
// memory of idle watchers. Run them with
//
//	go test -run '^$' -bench 'Events' -benchtime=200x ./internal/app/
//
// Everything runs on this machine over loopback: the server in-process
// (apptest), a gRPC watch client, a real HTTP receiver. The latency is
// measured from the start of the write call (CreateRequest: gRPC,
// authorization, one transaction, commit) to the event's arrival, so it
// includes the write itself; write_p50_ms is that call alone. Writes are
// sequential (one at a time), so this is the latency of an idle system,
// not a load test.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

func benchEnv(b *testing.B, cfg func(*app.Config)) *apptest.Env {
	b.Helper()
	return apptest.Start(b, apptest.Options{Seed: true, Config: func(c *app.Config) {
		c.WebhookHTTPHosts, c.WebhookAllowedCIDRs = "127.0.0.1", "127.0.0.0/8"
		if cfg != nil {
			cfg(c)
		}
	}})
}

func reportLatencies(b *testing.B, lat, write []time.Duration) {
	slices.Sort(lat)
	slices.Sort(write)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99_ms")
	b.ReportMetric(ms(write[len(write)/2]), "write_p50_ms")
}

func benchRequest(i int) *pb.Request {
	return wfSmallVC("team-a", "bench-"+strconv.Itoa(i))
}

// BenchmarkEventsCommitToWatcher: a write, then the watcher's CHANGED event.
func BenchmarkEventsCommitToWatcher(b *testing.B) {
	e := benchEnv(b, nil)
	ctx, cancel := context.WithCancel(e.As(b, "bob"))
	defer cancel()
	stream, err := pb.NewWatchServiceClient(e.Conn).WatchRequests(ctx, &pb.WatchRequestsRequest{Team: teamA})
	if err != nil {
		b.Fatal(err)
	}
	arrived := make(chan string, 16)
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				close(arrived)
				return
			}
			if ev.GetKind() == pb.WatchEventKind_CHANGED {
				arrived <- ev.GetRequest().GetName()
			}
		}
	}()
	bob := e.As(b, "bob")
	var lat, write []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		r, err := e.Requests.CreateRequest(bob, &pb.CreateRequestRequest{Request: benchRequest(i)})
		if err != nil {
			b.Fatal(err)
		}
		write = append(write, time.Since(start))
		for name := range arrived {
			if name == r.GetName() {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, lat, write)
}

// BenchmarkEventsCommitToWebhook: a write, then a signed delivery at a
// real HTTP receiver.
func BenchmarkEventsCommitToWebhook(b *testing.B) {
	e := benchEnv(b, nil)
	arrived := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
		arrived <- r.Header.Get("webhook-id")
	}))
	defer srv.Close()
	hooks := pb.NewWebhookServiceClient(e.Conn)
	if _, err := hooks.CreateWebhookSubscription(e.As(b, "bob"), &pb.CreateWebhookSubscriptionRequest{WebhookSubscriptionId: "bench",
		WebhookSubscription: &pb.WebhookSubscription{Team: teamA, Url: srv.URL, EventTypes: []string{"request.created"}}}); err != nil {
		b.Fatal(err)
	}
	bob := e.As(b, "bob")
	var lat, write []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if _, err := e.Requests.CreateRequest(bob, &pb.CreateRequestRequest{Request: benchRequest(i)}); err != nil {
			b.Fatal(err)
		}
		write = append(write, time.Since(start))
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			b.Fatal("no delivery")
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, lat, write)
}

// BenchmarkEventsIdleWatchers: 1,000 open, idle watches on one server.
// Reported: heap bytes and goroutines per watcher, measured in this
// process, which holds the server AND the gRPC clients, so it is an upper
// bound of the server's share. Run with -benchtime=1x.
func BenchmarkEventsIdleWatchers(b *testing.B) {
	const watchers = 1000
	e := benchEnv(b, func(c *app.Config) { c.WatchMaxPerUser = watchers })
	users := []string{"bob", "carol", "dan", "erin", "frank"}
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		synced := make(chan struct{}, watchers)
		for i := range watchers {
			stream, err := pb.NewWatchServiceClient(e.Conn).WatchRequests(
				metadataCtx(ctx, e, b, users[i%len(users)]), &pb.WatchRequestsRequest{})
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				for {
					ev, err := stream.Recv()
					if err != nil {
						return
					}
					if ev.GetKind() == pb.WatchEventKind_SYNCED {
						synced <- struct{}{}
					}
				}
			})
		}
		for range watchers {
			<-synced
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/watchers, "heap_B/watcher")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/watchers, "goroutines/watcher")
		cancel()
		wg.Wait()
	}
}

func metadataCtx(ctx context.Context, e *apptest.Env, b *testing.B, user string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.Token(b, user))
}
