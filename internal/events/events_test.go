package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

type feed struct {
	db      *store.DB
	commits *store.CommitSignal
	waker   *events.Waker
}

func newFeed(t testing.TB) feed {
	t.Helper()
	commits := store.NewCommitSignal()
	return feed{db: store.New(storetest.Pool(t), store.WithCommitSignal(commits)), commits: commits, waker: events.NewWaker()}
}

// startHub runs a hub until the test ends and waits until it is ready.
func startHub(t *testing.T, f feed, cfg events.HubConfig) *events.Hub {
	t.Helper()
	hub := events.NewHub(f.db, f.waker, nil, cfg)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	if err := hub.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return hub
}

func (f feed) sequencer(cfg events.SequencerConfig) *events.Sequencer {
	return events.NewSequencer(f.db, f.commits, f.waker, nil, cfg)
}

// record writes one event for resource in tx.
func record(ctx context.Context, tx *store.Tx, resource string, n int) error {
	return audit.Record(ctx, tx, audit.Event{Actor: reqctx.System("test"), Action: "UpdateTeam", Resource: resource,
		Team: "t", Department: "d", After: map[string]any{"name": resource, "display_name": fmt.Sprint(n)}})
}

// auditID reads the audit id of the newest event of resource.
func auditID(t *testing.T, db *store.DB, resource string) int64 {
	t.Helper()
	list, _, err := audit.List(context.Background(), db, 1, `resource = "`+resource+`"`, audit.FirstPage, store.Scope{All: true}, nil)
	if err != nil || len(list) != 1 {
		t.Fatalf("audit event of %s: %v %v", resource, list, err)
	}
	return list[0].ID
}

// TestSlowTransactionIsNotSkipped is the ordering proof in its smallest
// form: T1 writes its event first (lower id) but commits after T2. A
// reader that had moved past T2's event by id would never see T1's; by
// position it sees both, T2's first.
func TestSlowTransactionIsNotSkipped(t *testing.T) {
	ctx := context.Background()
	f := newFeed(t)
	seq := f.sequencer(events.SequencerConfig{})
	hub := startHub(t, f, events.HubConfig{})

	written, release, t1Done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		t1Done <- f.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
			if err := record(ctx, tx, "teams/slow", 1); err != nil {
				return err
			}
			// The audit row is a deferred write (store.Tx.ExecDeferred):
			// a statement of the transaction's own sends it now, drawing
			// its id before T2's.
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			close(written)
			<-release
			return nil
		})
	}()
	<-written
	if err := f.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		return record(ctx, tx, "teams/fast", 1)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := seq.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, hub, 0, 1)
	if got[0].Resource != "teams/fast" || got[0].Position != 1 {
		t.Fatalf("first event: %+v", got[0])
	}
	if _, err := seq.Pass(ctx); err != nil { // T1 still open: nothing new, the low water stays put
		t.Fatal(err)
	}
	lowWhileOpen := lowWater(t, f.db)
	close(release)
	if err := <-t1Done; err != nil {
		t.Fatal(err)
	}
	slowID, fastID := auditID(t, f.db, "teams/slow"), auditID(t, f.db, "teams/fast")
	if slowID >= fastID {
		t.Fatalf("the slow transaction's event must have the lower id (%d vs %d) for this test to mean anything", slowID, fastID)
	}
	if lowWhileOpen >= slowID {
		t.Fatalf("low water %d passed the open transaction's event %d", lowWhileOpen, slowID)
	}
	if _, err := seq.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	got = readAll(t, hub, got[0].Position, 1)
	if got[0].Resource != "teams/slow" || got[0].Position != 2 || got[0].ID != slowID {
		t.Fatalf("the slow transaction's event after position 1: %+v", got[0])
	}
	// With T1 done, the sequencer no longer needs to look below both.
	if low := lowWater(t, f.db); low < fastID {
		t.Fatalf("low water %d did not move past %d once every writer ended", low, fastID)
	}
}

func lowWater(t *testing.T, db *store.DB) int64 {
	t.Helper()
	var low int64
	if err := db.QueryRow(context.Background(), `SELECT low_water FROM event_feed`).Scan(&low); err != nil {
		t.Fatal(err)
	}
	return low
}

// readAll waits until the hub has n events after position and returns them.
func readAll(t *testing.T, hub *events.Hub, position int64, n int) []*events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*events.Event
	for len(out) < n {
		changed := hub.Changed()
		evs, err := hub.Since(ctx, position, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 {
			out = append(out, evs...)
			position = evs[len(evs)-1].Position
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("waited for %d events after position %d, have %d", n, position, len(out))
		}
	}
	return out
}

// TestConcurrentWritersNeverSkipped: writers commit out of id order (random
// pauses between their insert and their commit), some roll back, two
// sequencers (as in two processes) run at once; a reader tailing by
// position ends up with exactly the committed events, each once, with
// contiguous positions and every object's events in the order written.
func TestConcurrentWritersNeverSkipped(t *testing.T) {
	ctx := context.Background()
	f := newFeed(t)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for range 2 {
		go f.sequencer(events.SequencerConfig{Poll: 20 * time.Millisecond, Batch: 7}).Run(runCtx)
	}
	hub := startHub(t, f, events.HubConfig{Keep: 16})

	const writers, txPerWriter = 8, 30
	var mu sync.Mutex
	committed := map[string]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obj := fmt.Sprintf("teams/w%d", w)
			for i := range txPerWriter {
				nEvents := 1 + rand.IntN(3)
				rollback := rand.IntN(5) == 0
				var names []string
				err := f.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
					names = names[:0]
					for k := range nEvents {
						if err := record(ctx, tx, obj, i*10+k); err != nil {
							return err
						}
						names = append(names, fmt.Sprint(i*10+k))
						time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				if err != nil && !errors.Is(err, errRollback) {
					t.Error(err)
					return
				}
				if err == nil {
					mu.Lock()
					for _, n := range names {
						committed[obj+"#"+n] = true
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// First the sequencer: every committed event gets a position.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var last, low, typed, positioned int64
		if err := f.db.QueryRow(ctx, `SELECT last_position, low_water, (SELECT count(*) FROM audit_events WHERE event_type IS NOT NULL),
			(SELECT count(*) FROM event_positions) FROM event_feed`).Scan(&last, &low, &typed, &positioned); err != nil {
			t.Fatal(err)
		}
		if last == int64(len(committed)) {
			break
		}
		if time.Now().After(deadline) {
			var missing []int64
			rows, err := f.db.Query(ctx, `SELECT a.id FROM audit_events a WHERE a.event_type IS NOT NULL
				AND NOT EXISTS (SELECT 1 FROM event_positions p WHERE p.audit_id = a.id) ORDER BY a.id`)
			if err == nil {
				missing, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			}
			t.Fatalf("sequencer: last position %d, want %d (low water %d, %d events in the audit log, %d positioned, unpositioned ids %v %v)",
				last, len(committed), low, typed, positioned, missing, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := readAll(t, hub, 0, len(committed))
	seen := map[string]bool{}
	lastOf := map[string]int{}
	for i, e := range got {
		if e.Position != int64(i+1) {
			t.Fatalf("event %d has position %d: positions must be contiguous from 1", i, e.Position)
		}
		var after struct {
			N string `json:"display_name"`
		}
		if err := json.Unmarshal(e.After, &after); err != nil {
			t.Fatal(err)
		}
		key := e.Resource + "#" + after.N
		if seen[key] {
			t.Fatalf("%s delivered twice", key)
		}
		seen[key] = true
		if !committed[key] {
			t.Fatalf("%s was rolled back but is in the feed", key)
		}
		var n int
		_, _ = fmt.Sscan(after.N, &n)
		if prev, ok := lastOf[e.Resource]; ok && n <= prev {
			t.Fatalf("%s: event %d after %d: out of the order written", e.Resource, n, prev)
		}
		lastOf[e.Resource] = n
	}
	if len(seen) != len(committed) {
		t.Fatalf("reader saw %d events, %d committed", len(seen), len(committed))
	}
	// Nothing more arrives.
	time.Sleep(100 * time.Millisecond)
	if more, _ := hub.Since(ctx, int64(len(got)), 10); len(more) > 0 {
		t.Fatalf("unexpected extra events: %+v", more[0])
	}
}

var errRollback = errors.New("roll back")

// sequencedFeed is a new feed holding n events of resource, each committed
// on its own, sequenced at positions 1..n.
func sequencedFeed(t *testing.T, resource string, n int) feed {
	t.Helper()
	ctx := context.Background()
	f := newFeed(t)
	for i := range n {
		if err := f.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
			return record(ctx, tx, resource, i)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.sequencer(events.SequencerConfig{}).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRetentionExpiresOldPositions: once positions fall out of retention a
// resume from before them is EVENTS_EXPIRED (OUT_OF_RANGE), from the
// newest kept one it works, and one from the future is refused too.
func TestRetentionExpiresOldPositions(t *testing.T) {
	ctx := context.Background()
	f := sequencedFeed(t, "teams/r", 3)
	// Retention of 1h, then a sequencer whose clock says everything is old:
	// prune directly through a sequencer with a negative retention window.
	pruner := f.sequencer(events.SequencerConfig{Retention: time.Nanosecond, PruneEvery: 10 * time.Millisecond, Poll: time.Hour})
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { pruner.Run(pctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := events.ReadBounds(ctx, f.db)
		if err != nil {
			t.Fatal(err)
		}
		if b.First == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention did not run: %+v", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	for _, pos := range []int64{0, 2} {
		_, err := events.CheckResume(ctx, f.db, pos)
		if e, ok := errs.As(err); !ok || e.Kind != errs.KindOutOfRange || e.Reason != errs.ReasonEventsExpired {
			t.Fatalf("resume from %d: %v", pos, err)
		}
	}
	if _, err := events.CheckResume(ctx, f.db, 3); err != nil {
		t.Fatalf("resume from the last position: %v", err)
	}
	if _, err := events.CheckResume(ctx, f.db, 99); errs.KindOf(err) != errs.KindOutOfRange {
		t.Fatalf("resume from the future: %v", err)
	}
	hub := startHub(t, f, events.HubConfig{})
	if _, err := hub.Since(ctx, 1, 10); errs.KindOf(err) != errs.KindOutOfRange {
		t.Fatalf("reading from a pruned position: %v", err)
	}
}

// TestSinceBelowTheFirstPositionIsExpired: retention moves the feed's
// first position before it deletes the positions below it; a reader far
// behind in between is told its position expired, as CheckResume tells a
// watch that starts there, not handed the rows about to go.
func TestSinceBelowTheFirstPositionIsExpired(t *testing.T) {
	ctx := context.Background()
	f := sequencedFeed(t, "teams/x", 3)
	hub := startHub(t, f, events.HubConfig{Keep: 1})
	// What retention's first step leaves: positions 1 and 2 are gone as
	// far as the feed says, their rows not yet deleted.
	if _, err := f.db.Exec(ctx, `UPDATE event_feed SET first_position = 3`); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Since(ctx, 0, 10); errs.KindOf(err) != errs.KindOutOfRange {
		t.Fatalf("reading from position 0 with the feed starting at 3: %v", err)
	}
	evs, err := hub.Since(ctx, 2, 10)
	if err != nil || len(evs) == 0 || evs[0].Position != 3 {
		t.Fatalf("reading from position 2 (the first one may resume from): %v, %v", evs, err)
	}
}

// TestSnapshotSeesUnsequencedEvents: a committed event the sequencer has
// not reached is part of the snapshot's state, so Snapshot names it and
// returns the position before it.
func TestSnapshotSeesUnsequencedEvents(t *testing.T) {
	ctx := context.Background()
	f := newFeed(t)
	if err := f.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		return record(ctx, tx, "teams/s", 1)
	}); err != nil {
		t.Fatal(err)
	}
	listed := false
	pos, seen, err := events.Snapshot(ctx, f.db, func(ctx context.Context, q store.Querier) error { listed = true; return nil })
	if err != nil || !listed {
		t.Fatal(err)
	}
	id := auditID(t, f.db, "teams/s")
	if pos != 0 || !seen[id] || len(seen) != 1 {
		t.Fatalf("snapshot: position %d, seen %v (want 0 and {%d})", pos, seen, id)
	}
	if _, err := f.sequencer(events.SequencerConfig{}).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	pos, seen, err = events.Snapshot(ctx, f.db, func(context.Context, store.Querier) error { return nil })
	if err != nil || pos != 1 || len(seen) != 0 {
		t.Fatalf("after sequencing: position %d, seen %v, %v", pos, seen, err)
	}
}

// TestWatchLimitPerUser: the hub counts watches per user.
func TestWatchLimitPerUser(t *testing.T) {
	f := newFeed(t)
	hub := events.NewHub(f.db, f.waker, nil, events.HubConfig{MaxWatchesPerUser: 2})
	r1, err1 := hub.Acquire("bob")
	_, err2 := hub.Acquire("bob")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := hub.Acquire("bob"); errs.KindOf(err) != errs.KindResourceExhausted {
		t.Fatalf("third watch: %v", err)
	}
	if _, err := hub.Acquire("carol"); err != nil {
		t.Fatalf("another user: %v", err)
	}
	r1()
	r1() // idempotent
	if _, err := hub.Acquire("bob"); err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	hub.Close()
	if _, err := hub.Acquire("dan"); errs.KindOf(err) != errs.KindUnavailable {
		t.Fatalf("after close: %v", err)
	}
	select {
	case <-hub.Closing():
	default:
		t.Fatal("Closing not closed")
	}
}
