package sdktest_test

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/pkg/client"
)

// cutter is a TCP proxy whose connections the test can cut, as a load
// balancer restart or a network blip would.
type cutter struct {
	lis    net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	target string
}

func newCutter(t *testing.T, target string) *cutter {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{lis: lis, target: target}
	t.Cleanup(func() { lis.Close(); c.cut() })
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return c
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// TestWatchIteratorResumes: the SDK's watch iterator, cut off mid-stream,
// reconnects and resumes after the last event it yielded: the caller sees
// every request created, once, in order.
func TestWatchIteratorResumes(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true, Config: func(c *app.Config) { c.WatchHeartbeat = 200 * time.Millisecond }})
	proxy := newCutter(t, e.App.GRPCAddr())
	bob := newClient(t, client.Config{Address: proxy.lis.Addr().String(), Insecure: true, TokenFunc: client.StaticToken(e.Token(t, "bob"))})
	writer := newClient(t, client.Config{Address: e.App.GRPCAddr(), Insecure: true, TokenFunc: client.StaticToken(e.Token(t, "bob"))})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	const total = 12
	var want []string
	create := func(i int) {
		r, err := writer.Requests.CreateRequest(ctx, &pb.CreateRequestRequest{Request: &pb.Request{
			Team: "teams/team-a", Justification: "watch test",
			Payload: &pb.Request_CreateVirtualCluster{CreateVirtualCluster: &pb.CreateVirtualClusterPayload{
				VirtualClusterId: "it-" + strconv.Itoa(i), Spec: &pb.VirtualClusterSpec{Quota: &pb.Quota{Gpu: "0", CpuMillis: 10}},
			}},
		}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		want = append(want, r.GetName())
	}
	var got []string
	var last int64
	for ev, err := range bob.WatchRequests(ctx, &pb.WatchRequestsRequest{Team: "teams/team-a"}, client.WithMaxRetryDelay(200*time.Millisecond)) {
		if err != nil {
			t.Fatalf("watch: %v (saw %d)", err, len(got))
		}
		switch ev.GetKind() {
		case pb.WatchEventKind_SYNCED:
			create(0)
		case pb.WatchEventKind_CHANGED:
			if ev.GetPosition() <= last {
				t.Errorf("position %d after %d", ev.GetPosition(), last)
			}
			last = ev.GetPosition()
			got = append(got, ev.GetRequest().GetName())
			if len(got) == total {
				break
			}
			if len(got)%4 == 0 {
				// Cut the connection, then write while the client is away.
				proxy.cut()
				create(len(want))
			}
			create(len(want))
		}
		if len(got) == total {
			break
		}
	}
	if !slices.Equal(got, want[:total]) {
		t.Errorf("watch saw\n%v\nwant\n%v", got, want[:total])
	}
}
