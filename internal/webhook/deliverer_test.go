package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/webhook"
)

// delivererDSNEnv makes the test binary a bare deliverer process (the
// one TestDelivererKilledMidDelivery kills).
const delivererDSNEnv = "GPUPLANE_TEST_DELIVERER_DSN"

func TestMain(m *testing.M) {
	if dsn := os.Getenv(delivererDSNEnv); dsn != "" {
		runDeliverer(dsn)
		return
	}
	storetest.Main(m)
}

func localPolicy() *webhook.URLPolicy {
	p, err := webhook.NewURLPolicy([]string{"127.0.0.1"}, []string{"127.0.0.0/8"})
	if err != nil {
		panic(err)
	}
	return p
}

func fastConfig() webhook.Config {
	return webhook.Config{Timeout: time.Second, Lease: 2 * time.Second, BackoffBase: 50 * time.Millisecond,
		BackoffMax: 200 * time.Millisecond, Poll: 50 * time.Millisecond, DisableAfter: -1, MaxAttempts: 1000}
}

func runDeliverer(dsn string) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := store.Open(ctx, dsn, 4)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	webhook.NewDeliverer(store.New(pool), localPolicy(), events.NewWaker(), nil, fastConfig()).Run(ctx)
}

// writeEvents writes one event per resource in order, each in its own
// transaction, and positions them.
func writeEvents(t *testing.T, db *store.DB, resources ...string) {
	t.Helper()
	ctx := context.Background()
	for i, r := range resources {
		err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
			return audit.Record(ctx, tx, audit.Event{Actor: reqctx.System("test"), Action: "UpdateTeam", Resource: r,
				Team: "t", Department: "d", After: map[string]any{"name": r, "display_name": strconv.Itoa(i)}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := events.NewSequencer(db, nil, nil, nil, events.SequencerConfig{}).Pass(ctx); err != nil {
		t.Fatal(err)
	}
}

// sink is a real receiver recording (event id, subject, position).
type sink struct {
	mu      sync.Mutex
	got     []received
	hold    chan struct{} // while non-nil, the first request blocks until closed
	holding chan string   // receives the id of the held request
}

type received struct {
	id, subject string
	position    int64
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	hold := s.hold
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		s.holding <- r.Header.Get(webhook.HeaderID)
		<-hold
		return // the deliverer is dead by now; nobody reads this answer
	}
	var ev struct {
		ID       string `json:"id"`
		Subject  string `json:"subject"`
		Position string `json:"gpuplaneposition"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p, _ := strconv.ParseInt(ev.Position, 10, 64)
	s.mu.Lock()
	s.got = append(s.got, received{id: r.Header.Get(webhook.HeaderID), subject: ev.Subject, position: p})
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *sink) wait(t *testing.T, n int) []received {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		got := append([]received(nil), s.got...)
		s.mu.Unlock()
		if len(got) >= n {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("receiver got %d deliveries, want %d", len(s.got), n)
	return nil
}

// TestDelivererKilledMidDelivery: a deliverer process is SIGKILLed while
// its first delivery is on the wire. Another deliverer takes over when the
// lease expires: the interrupted event arrives again with the same id,
// nothing is lost and each object's events arrive in order (events the
// killed process had delivered without recording it arrive twice: at
// least once, not exactly once).
func TestDelivererKilledMidDelivery(t *testing.T) {
	dsn := storetest.New(t)
	ctx := context.Background()
	pool, err := store.Open(ctx, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := store.New(pool)

	release := make(chan struct{})
	rcv := &sink{hold: release, holding: make(chan string, 1)}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	if err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		_, err := webhook.Create(ctx, tx, reqctx.System("test"), "", webhook.Subscription{ID: "all", URL: srv.URL, EventTypes: []string{"team.*"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	resources := []string{"teams/a", "teams/b", "teams/a", "teams/c", "teams/b", "teams/a", "teams/c", "teams/a"}
	writeEvents(t, db, resources...)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), delivererDSNEnv+"="+dsn)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var heldID string
	select {
	case heldID = <-rcv.holding:
	case <-time.After(30 * time.Second):
		_ = child.Process.Kill()
		t.Fatal("the deliverer process never delivered")
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	releaseOnce.Do(func() { close(release) })

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		webhook.NewDeliverer(db, localPolicy(), events.NewWaker(), nil, fastConfig()).Run(runCtx)
		close(done)
	}()
	defer func() { stop(); <-done }()

	// Every event arrives; those the killed process had on the wire (its
	// outcome never recorded) arrive again: at least once, never reordered
	// per object (a later event of an object waits for the earlier one).
	var got []received
	distinct := func() map[string]bool {
		ids := map[string]bool{}
		for _, g := range got {
			ids[g.id] = true
		}
		return ids
	}
	for deadline := time.Now().Add(30 * time.Second); len(distinct()) < len(resources); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events arrived: %v", len(distinct()), len(resources), got)
		}
		got = rcv.wait(t, 1)
	}
	time.Sleep(300 * time.Millisecond)
	got = rcv.wait(t, 1)
	ids := distinct()
	if dup := len(got) - len(resources); dup > 8 {
		t.Errorf("%d duplicates, more than the killed deliverer had in flight (8): %v", dup, got)
	}
	last := map[string]int64{}
	for _, g := range got {
		if g.position < last[g.subject] {
			t.Errorf("%s: position %d after %d", g.subject, g.position, last[g.subject])
		}
		last[g.subject] = g.position
	}
	if !ids[heldID] {
		t.Errorf("the event cut off mid-delivery (id %s) never arrived again: %v", heldID, got)
	}
	if len(ids) != len(resources) {
		t.Errorf("%d distinct events, want %d: %v", len(ids), len(resources), got)
	}
}

// TestDispatchWithoutSubscriptionsDoesNothing: an installation without
// webhook subscriptions pays nothing for the dispatcher (no transaction, so
// the dispatch row is neither locked nor written), and a subscription
// created later still gets exactly the events after its creation, with no
// events reported lost although the ones before it fell out of retention
// while the dispatcher's position stood still.
func TestDispatchWithoutSubscriptionsDoesNothing(t *testing.T) {
	pool := storetest.Pool(t)
	db := store.New(pool)
	ctx := context.Background()
	var logged bytes.Buffer
	d := webhook.NewDeliverer(db, localPolicy(), events.NewWaker(), slog.New(slog.NewTextHandler(&logged, nil)), fastConfig())
	dispatchRow := func() string {
		t.Helper()
		var row string
		if err := pool.QueryRow(ctx, `SELECT xmin::text || '/' || xmax::text || '/' || last_position FROM webhook_dispatch`).Scan(&row); err != nil {
			t.Fatal(err)
		}
		return row
	}

	before := dispatchRow()
	writeEvents(t, db, "teams/a", "teams/b", "teams/a")
	for range 3 {
		if created, full, err := d.Dispatch(ctx); err != nil || created != 0 || full {
			t.Fatalf("dispatch without subscriptions: created %d, full %v, err %v", created, full, err)
		}
	}
	if after := dispatchRow(); after != before {
		t.Fatalf("the dispatch row (xmin/xmax/position) went from %s to %s without any subscription", before, after)
	}

	// Retention removes the positions nobody was owed; then a subscription
	// starts after the head (3) and two more team events happen.
	pruneAll(t, db, 4)
	var sub webhook.Subscription
	if err := db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		var err error
		sub, err = webhook.Create(ctx, tx, reqctx.System("test"), "", webhook.Subscription{ID: "late", URL: "http://127.0.0.1:1/", EventTypes: []string{"team.*"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if sub.StartPosition != 3 {
		t.Fatalf("subscription starts at %d, want 3 (the head at its creation)", sub.StartPosition)
	}
	writeEvents(t, db, "teams/c", "teams/a")
	created, _, err := d.Dispatch(ctx)
	if err != nil || created != 2 {
		t.Fatalf("dispatch with the subscription: created %d, err %v; want the 2 events after its start", created, err)
	}
	rows, err := pool.Query(ctx, `SELECT position FROM webhook_deliveries WHERE subscription_id = 'late' ORDER BY position`)
	if err != nil {
		t.Fatal(err)
	}
	positions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	// Position 4 is the subscription's own creation, not a team event.
	if fmt.Sprint(positions) != "[5 6]" {
		t.Fatalf("deliveries at positions %v, want [5 6]", positions)
	}
	if strings.Contains(logged.String(), "fell out of retention") {
		t.Fatalf("events before the only subscription's start were reported lost:\n%s", logged.String())
	}
	if created, _, err := d.Dispatch(ctx); err != nil || created != 0 {
		t.Fatalf("second dispatch: created %d, err %v; want nothing new", created, err)
	}
}

// pruneAll runs retention with a window of a nanosecond until the oldest
// position kept is first.
func pruneAll(t *testing.T, db *store.DB, first int64) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		events.NewSequencer(db, store.NewCommitSignal(), events.NewWaker(), nil, events.SequencerConfig{Retention: time.Nanosecond, PruneEvery: 10 * time.Millisecond, Poll: time.Hour}).Run(ctx)
		close(done)
	}()
	defer func() { stop(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := events.ReadBounds(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if b.First == first {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention did not run: %+v", b)
		}
	}
}
