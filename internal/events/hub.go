package events

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/store"
)

// HubConfig tunes a Hub.
type HubConfig struct {
	// Keep is how many recent events the hub holds in memory; watchers
	// further behind read from the database. Default 4096.
	Keep int
	// Batch bounds one read of the feed; default 500.
	Batch int
	// Poll is how often the hub looks without being woken; default 2s.
	Poll time.Duration
	// MaxWatchesPerUser bounds the open watches of one subject; 0: 16.
	MaxWatchesPerUser int
	// Decode runs once per event before any watcher sees it (the API
	// layer turns the JSON into its messages there); nil: nothing.
	Decode func(*Event)
}

// Hub tails the feed once per process and hands events to any number of
// watchers. Watchers do not get a queue each: they keep a position and ask
// Since for what follows it, then wait on Changed. Memory is one shared
// window of recent events; a watcher far behind (a resume) reads the
// database until it reaches the window.
type Hub struct {
	db    *store.DB
	waker *Waker
	log   *slog.Logger
	cfg   HubConfig

	mu      sync.RWMutex
	window  []*Event // contiguous positions, window[0].Position == start
	start   int64
	head    int64 // last position loaded
	changed chan struct{}

	ready chan struct{} // closed once head is known

	wmu     sync.Mutex
	perUser map[string]int
	closing chan struct{}
	closed  bool
}

// NewHub builds a hub; Run starts it at the feed's last position then
// (the schema may still be migrating when the server starts).
func NewHub(db *store.DB, waker *Waker, log *slog.Logger, cfg HubConfig) *Hub {
	if cfg.Keep <= 0 {
		cfg.Keep = 4096
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.MaxWatchesPerUser <= 0 {
		cfg.MaxWatchesPerUser = 16
	}
	if log == nil {
		log = slog.Default()
	}
	return &Hub{db: db, waker: waker, log: log, cfg: cfg, changed: make(chan struct{}), ready: make(chan struct{}),
		perUser: map[string]int{}, closing: make(chan struct{})}
}

// Run tails the feed until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	wake, unsubscribe := h.waker.Subscribe()
	defer unsubscribe()
	poll := time.NewTicker(h.cfg.Poll)
	defer poll.Stop()
	failures := 0
	for {
		b, err := ReadBounds(ctx, h.db)
		if err == nil {
			h.mu.Lock()
			h.start, h.head = b.Last+1, b.Last
			h.mu.Unlock()
			close(h.ready)
			break
		}
		failures++
		if failures == 1 || failures%60 == 0 {
			h.log.Warn("the event feed is not readable yet (schema behind?); retrying", "error", err)
		}
		if !Sleep(ctx, backoff(failures, 100*time.Millisecond, time.Second)) {
			return
		}
	}
	failures = 0
	for {
		started := time.Now()
		n, err := h.load(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			h.log.Warn("reading the event feed failed; retrying", "error", err, "failures", failures)
			if !Sleep(ctx, backoff(failures, 50*time.Millisecond, 5*time.Second)) {
				return
			}
			continue
		case n == h.cfg.Batch:
			continue
		}
		failures = 0
		select {
		case <-ctx.Done():
			return
		case <-wake:
			if !Pace(ctx, started, MinPassInterval) {
				return
			}
		case <-poll.C:
		}
	}
}

// load appends what follows head to the window and wakes the watchers.
func (h *Hub) load(ctx context.Context) (int, error) {
	h.mu.RLock()
	head := h.head
	h.mu.RUnlock()
	if h.Watches() == 0 {
		// Nobody to hand events to: move the head on without reading or
		// decoding them. The window starts over after it; a watch that
		// opens later at an older position reads the database until it
		// gets there, as one far behind always does (Since).
		b, err := readBoundsShared(ctx, h.db)
		if err != nil || b.Last <= head {
			return 0, err
		}
		h.mu.Lock()
		h.window, h.start, h.head = nil, b.Last+1, b.Last
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
		return 0, nil
	}
	evs, err := Read(ctx, h.db, head, h.cfg.Batch)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	for _, e := range evs {
		if h.cfg.Decode != nil {
			h.cfg.Decode(e)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if evs[0].Position != h.head+1 {
		// Retention pruned what we had not read yet (the hub was stalled
		// for longer than the retention): start a new window; watchers
		// behind it read the database and learn that their position expired.
		h.log.Warn("event feed skipped ahead of the hub (retention)", "head", h.head, "next", evs[0].Position)
		h.window, h.start = nil, evs[0].Position
	}
	h.window = append(h.window, evs...)
	if over := len(h.window) - h.cfg.Keep; over > h.cfg.Keep/4 {
		// Copy rather than reslice, so the dropped events can be freed;
		// watchers holding the old slice keep theirs valid.
		h.window = append([]*Event(nil), h.window[over:]...)
		h.start += int64(over)
	}
	h.head = h.window[len(h.window)-1].Position
	close(h.changed)
	h.changed = make(chan struct{})
	return len(evs), nil
}

// Ready waits until the hub knows the feed's head.
func (h *Hub) Ready(ctx context.Context) error {
	select {
	case <-h.ready:
		return nil
	case <-h.closing:
		return ShuttingDown(0)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Head is the last position the hub has loaded.
func (h *Hub) Head() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.head
}

// Changed is closed when events after the current head arrive. Take it
// before calling Since, so an arrival in between is not missed.
func (h *Hub) Changed() <-chan struct{} {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.changed
}

// Since returns up to limit events after position (none when the hub has
// nothing newer yet). A position the feed no longer holds is an Expired
// error.
func (h *Hub) Since(ctx context.Context, position int64, limit int) ([]*Event, error) {
	h.mu.RLock()
	if position >= h.head {
		h.mu.RUnlock()
		return nil, nil
	}
	if position+1 >= h.start {
		i := int(position + 1 - h.start)
		out := h.window[i:min(len(h.window), i+limit)]
		h.mu.RUnlock()
		return out, nil
	}
	h.mu.RUnlock()
	// Below the feed's first position is expired even while retention has
	// not deleted those rows yet (it moves first_position before it
	// deletes): the rule a watch meets when it starts.
	if _, err := CheckResume(ctx, h.db, position); err != nil {
		return nil, err
	}
	evs, err := Read(ctx, h.db, position, limit)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 || evs[0].Position != position+1 {
		b, err := ReadBounds(ctx, h.db)
		if err != nil {
			return nil, err
		}
		return nil, Expired(position, b)
	}
	for _, e := range evs {
		if h.cfg.Decode != nil {
			h.cfg.Decode(e)
		}
	}
	return evs, nil
}

// Acquire counts a watch of user against the per-user limit; release ends
// it. A closing hub refuses new watches.
func (h *Hub) Acquire(user string) (release func(), err error) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if h.closed {
		return nil, ShuttingDown(0)
	}
	if h.perUser[user] >= h.cfg.MaxWatchesPerUser {
		return nil, errs.New(errs.KindResourceExhausted, errs.ReasonTooManyWatches,
			"too many open watches: at most %d per user; close one (or share one stream) and retry",
			h.cfg.MaxWatchesPerUser).With("limit", strconv.Itoa(h.cfg.MaxWatchesPerUser))
	}
	h.perUser[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.wmu.Lock()
			defer h.wmu.Unlock()
			if h.perUser[user]--; h.perUser[user] <= 0 {
				delete(h.perUser, user)
			}
		})
	}, nil
}

// Watches is the number of open watches.
func (h *Hub) Watches() int {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	n := 0
	for _, c := range h.perUser {
		n += c
	}
	return n
}

// Closing is closed when the server starts shutting down: watches end
// (clients resume elsewhere or after the restart).
func (h *Hub) Closing() <-chan struct{} { return h.closing }

// Close ends every watch and refuses new ones.
func (h *Hub) Close() {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.closing)
	}
}

// ShuttingDown is the error a watch ends with when the server stops;
// position (if any) is where to resume.
func ShuttingDown(position int64) error {
	e := errs.New(errs.KindUnavailable, errs.ReasonShuttingDown,
		"the server is shutting down; watch again with resume_position %d", position).WithRetryAfter(time.Second)
	if position > 0 {
		e = e.With("position", itoa(position))
	}
	return e
}

// Snapshot runs list in one read-only REPEATABLE READ transaction and
// returns the position the changes after that state start from, and the
// ids of events that list already saw although they have no position yet
// (committed, not yet sequenced: they are positioned after the returned
// position, and a watcher skips them instead of showing an older state
// after a newer one).
func Snapshot(ctx context.Context, db *store.DB, list func(ctx context.Context, q store.Querier) error) (int64, map[int64]bool, error) {
	var position int64
	var seen map[int64]bool
	err := db.InTx(ctx, store.TxOptions{Isolation: pgx.RepeatableRead, ReadOnly: true}, func(ctx context.Context, tx *store.Tx) error {
		b, err := ReadBounds(ctx, tx)
		if err != nil {
			return err
		}
		position = b.Last
		if seen, err = unsequenced(ctx, tx); err != nil {
			return err
		}
		return list(ctx, tx)
	})
	return position, seen, err
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
