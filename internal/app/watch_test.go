package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/errs"
)

// watchWorld is the authorization matrix's first world (demo roles plus
// departments/ops with teams/team-c) with fast heartbeats, so a watcher
// learns how far the feed went even when it may see nothing.
func watchWorld(t *testing.T, cfg func(*app.Config)) *apptest.Env {
	t.Helper()
	e := apptest.Start(t, apptest.Options{Seed: true, Config: func(c *app.Config) {
		c.WatchHeartbeat = 100 * time.Millisecond
		if cfg != nil {
			cfg(c)
		}
	}})
	apiCreateDepartment(t, e, "alice", "ops", "Ops", apiQuota("2", 16_000, 64*apiGiB), "ops-admins")
	apiCreateTeam(t, e, "alice", "team-c", deptB, pb.IsolationTier_SHARED, apiQuota("1", 8_000, 32*apiGiB))
	return e
}

// requestWatch reads a WatchRequests stream in the background.
type requestWatch struct {
	events chan *pb.RequestEvent
	done   chan error
	cancel context.CancelFunc
}

func watchRequests(t *testing.T, e *apptest.Env, user string, req *pb.WatchRequestsRequest) *requestWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(e.As(t, user))
	stream, err := pb.NewWatchServiceClient(e.Conn).WatchRequests(ctx, req)
	if err != nil {
		cancel()
		t.Fatalf("%s: WatchRequests: %v", user, err)
	}
	w := &requestWatch{events: make(chan *pb.RequestEvent, 1024), done: make(chan error, 1), cancel: cancel}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				w.done <- err
				close(w.events)
				return
			}
			w.events <- ev
		}
	}()
	t.Cleanup(cancel)
	return w
}

// until collects CHANGED and EXISTING events until stop says so (it sees
// every message, heartbeats too); it fails the test after 20s.
func (w *requestWatch) until(t *testing.T, stop func(*pb.RequestEvent) bool) []*pb.RequestEvent {
	t.Helper()
	var got []*pb.RequestEvent
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				t.Fatalf("watch ended early: %v", <-w.done)
			}
			if ev.GetKind() == pb.WatchEventKind_CHANGED || ev.GetKind() == pb.WatchEventKind_EXISTING {
				got = append(got, ev)
			}
			if stop(ev) {
				return got
			}
		case <-timeout:
			t.Fatalf("watch: timed out with %d events", len(got))
		}
	}
}

func reachedPosition(p int64) func(*pb.RequestEvent) bool {
	return func(ev *pb.RequestEvent) bool {
		return ev.GetKind() != pb.WatchEventKind_EXISTING && ev.GetPosition() >= p
	}
}

func isKind(k pb.WatchEventKind) func(*pb.RequestEvent) bool {
	return func(ev *pb.RequestEvent) bool { return ev.GetKind() == k }
}

// TestWatchAuthorizationMatrix: every matrix caller watches all the
// requests it may read while requests are created and decided in three
// teams of two departments; each sees exactly the events of the teams it
// can read (as ListRequests would answer), nothing of the others.
func TestWatchAuthorizationMatrix(t *testing.T) {
	e := watchWorld(t, nil)
	callers := []string{"alice", "frank", "bob", "carol", "dan", "erin"}
	readable := map[string][]string{
		"alice": {teamA, teamB, teamC}, "frank": {teamA, teamB},
		"bob": {teamA}, "carol": {teamA}, "dan": {teamB}, "erin": {teamB},
	}
	vcStreams := map[string]pb.WatchService_WatchVirtualClustersClient{}
	for _, u := range callers {
		ctx, cancel := context.WithCancel(e.As(t, u))
		t.Cleanup(cancel)
		st, err := pb.NewWatchServiceClient(e.Conn).WatchVirtualClusters(ctx, &pb.WatchVirtualClustersRequest{Parent: "teams/-"})
		if err != nil {
			t.Fatal(err)
		}
		vcStreams[u] = st
	}
	// Each virtual-cluster watch has sent the current state before the
	// writes below, so what they write arrives as CHANGED events.
	for _, u := range callers {
		for {
			ev, err := vcStreams[u].Recv()
			if err != nil {
				t.Fatalf("%s: virtual cluster watch: %v", u, err)
			}
			if ev.GetKind() == pb.WatchEventKind_SYNCED {
				break
			}
		}
	}
	watches := map[string]*requestWatch{}
	for _, u := range callers {
		watches[u] = watchRequests(t, e, u, &pb.WatchRequestsRequest{})
		watches[u].until(t, isKind(pb.WatchEventKind_SYNCED))
	}
	ra := wfCreate(t, e, "bob", wfSmallVC("team-a", "w-a"))
	rb := wfCreate(t, e, "dan", wfSmallVC("team-b", "w-b"))
	rc := wfCreate(t, e, "alice", wfSmallVC("team-c", "w-c"))
	wfApprove(t, e, "alice", ra.GetName())
	wfApprove(t, e, "alice", rb.GetName())

	// alice reads everything: her last event is the feed's head for these writes.
	all := watches["alice"].until(t, func(ev *pb.RequestEvent) bool {
		return ev.GetKind() == pb.WatchEventKind_CHANGED && ev.GetType() == "request.approved" && ev.GetRequest().GetName() == rb.GetName()
	})
	head := all[len(all)-1].GetPosition()
	_ = rc
	for _, u := range callers {
		got := all
		if u != "alice" {
			got = watches[u].until(t, reachedPosition(head))
		}
		teams := map[string]bool{}
		for _, ev := range got {
			teams[ev.GetRequest().GetTeam()] = true
		}
		var saw []string
		for team := range teams {
			saw = append(saw, team)
		}
		sort.Strings(saw)
		if !slices.Equal(saw, readable[u]) {
			t.Errorf("%s saw request events of %v, may read %v", u, saw, readable[u])
		}
		if u == "bob" && len(got) != 2 {
			t.Errorf("bob: want created+approved of %s, got %v", ra.GetName(), got)
		}
	}

	// The virtual clusters the requests created, watched across all teams.
	for _, u := range callers {
		teams := map[string]bool{}
		for {
			ev, err := vcStreams[u].Recv()
			if err != nil {
				t.Fatalf("%s: virtual cluster watch: %v", u, err)
			}
			if ev.GetKind() == pb.WatchEventKind_CHANGED {
				teams[ev.GetVirtualCluster().GetName()[:len("teams/team-x")]] = true
			}
			if ev.GetKind() != pb.WatchEventKind_EXISTING && ev.GetPosition() >= head {
				break
			}
		}
		for team := range teams {
			if !slices.Contains(readable[u], team) {
				t.Errorf("%s saw a virtual cluster event of %s", u, team)
			}
		}
		if len(teams) != len(readable[u]) {
			t.Errorf("%s saw virtual cluster events of %v, may read %v", u, teams, readable[u])
		}
	}

	// A team the caller cannot read is NOT_FOUND, as for reads.
	_, err := recvFirst(t, e, "bob", &pb.WatchRequestsRequest{Team: teamB})
	apiWantCode(t, err, codes.NotFound)
}

func recvFirst(t *testing.T, e *apptest.Env, user string, req *pb.WatchRequestsRequest) (*pb.RequestEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.As(t, user), 10*time.Second)
	defer cancel()
	stream, err := pb.NewWatchServiceClient(e.Conn).WatchRequests(ctx, req)
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// TestWatchResume: a watch interrupted at some position and resumed from
// it sees, in the union, every event committed, once, in order; positions
// the feed never held are OUT_OF_RANGE (REST: 410 Gone) with a reason
// telling the client to list again.
func TestWatchResume(t *testing.T) {
	e := watchWorld(t, nil)
	w := watchRequests(t, e, "bob", &pb.WatchRequestsRequest{Team: teamA})
	synced := w.until(t, isKind(pb.WatchEventKind_SYNCED))
	_ = synced
	var names []string
	for i := range 6 {
		names = append(names, wfCreate(t, e, "bob", wfSmallVC("team-a", "r-"+strconv.Itoa(i))).GetName())
	}
	first := w.until(t, func(ev *pb.RequestEvent) bool { return ev.GetRequest().GetName() == names[2] })
	w.cancel()
	for i := 6; i < 10; i++ {
		names = append(names, wfCreate(t, e, "bob", wfSmallVC("team-a", "r-"+strconv.Itoa(i))).GetName())
	}
	resumed := watchRequests(t, e, "bob", &pb.WatchRequestsRequest{Team: teamA, ResumePosition: first[len(first)-1].GetPosition()})
	rest := resumed.until(t, func(ev *pb.RequestEvent) bool { return ev.GetRequest().GetName() == names[9] })
	var seen []string
	last := int64(0)
	for _, ev := range append(first, rest...) {
		if ev.GetPosition() <= last {
			t.Errorf("position %d after %d", ev.GetPosition(), last)
		}
		last = ev.GetPosition()
		seen = append(seen, ev.GetRequest().GetName())
	}
	if !slices.Equal(seen, names) {
		t.Errorf("union of the two watches:\n%v\nwant the requests created:\n%v", seen, names)
	}

	_, err := recvFirst(t, e, "bob", &pb.WatchRequestsRequest{ResumePosition: 1 << 40})
	st := apiWantCode(t, err, codes.OutOfRange)
	if r := apiErrorInfo(t, st).GetReason(); r != errs.ReasonEventsExpired {
		t.Errorf("reason %q", r)
	}
	r := e.Do(t, "bob", http.MethodGet, "/v1/requests:watch?resumePosition="+strconv.FormatInt(1<<40, 10), nil)
	if r.Status != http.StatusGone {
		t.Errorf("REST resume from a position never held: %d %s, want 410", r.Status, r.Body)
	}
}

// TestWatchREST: the watch over REST is newline-delimited JSON, one
// {"result": event} per line, starting with the current state.
func TestWatchREST(t *testing.T) {
	e := watchWorld(t, nil)
	wfCreate(t, e, "bob", wfSmallVC("team-a", "rest-1"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.HTTPBase+"/v1/requests:watch?team=teams/team-a", nil)
	req.Header.Set("Authorization", "Bearer "+e.Token(t, "bob"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	lines := bufio.NewScanner(resp.Body)
	var kinds []string
	created := false
	for lines.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(lines.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		var ev pb.RequestEvent
		if err := protojson.Unmarshal(line.Result, &ev); err != nil {
			t.Fatalf("event %s: %v", line.Result, err)
		}
		kinds = append(kinds, ev.GetKind().String())
		switch ev.GetKind() {
		case pb.WatchEventKind_SYNCED:
			wfCreate(t, e, "bob", wfSmallVC("team-a", "rest-2"))
		case pb.WatchEventKind_CHANGED:
			created = ev.GetType() == "request.created" && wfID(ev.GetRequest().GetName()) != ""
		}
		if created {
			break
		}
	}
	if !created || kinds[0] != "EXISTING" {
		t.Errorf("stream kinds %v (err %v)", kinds, lines.Err())
	}
}

// TestWatchLimitAndShutdown: a user past the watch limit gets
// RESOURCE_EXHAUSTED; a server stopping ends every watch at once with
// UNAVAILABLE and the position to resume from.
func TestWatchLimitAndShutdown(t *testing.T) {
	e := watchWorld(t, func(c *app.Config) { c.WatchMaxPerUser = 2 })
	w1 := watchRequests(t, e, "bob", &pb.WatchRequestsRequest{})
	w2 := watchRequests(t, e, "bob", &pb.WatchRequestsRequest{})
	w1.until(t, isKind(pb.WatchEventKind_SYNCED))
	w2.until(t, isKind(pb.WatchEventKind_SYNCED))
	_, err := recvFirst(t, e, "bob", &pb.WatchRequestsRequest{})
	st := apiWantCode(t, err, codes.ResourceExhausted)
	if r := apiErrorInfo(t, st).GetReason(); r != errs.ReasonTooManyWatches {
		t.Errorf("reason %q", r)
	}
	if _, err := recvFirst(t, e, "carol", &pb.WatchRequestsRequest{}); err != nil {
		t.Errorf("another user's watch: %v", err)
	}

	start := time.Now()
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("stopping with open watches took %v", d)
	}
	for _, w := range []*requestWatch{w1, w2} {
		for range w.events {
		}
		err := <-w.done
		if status.Code(err) != codes.Unavailable || errors.Is(err, context.Canceled) {
			t.Errorf("watch ended with %v, want UNAVAILABLE", err)
		}
	}
}
