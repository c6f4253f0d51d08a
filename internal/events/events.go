// Package events is the change feed: audit events that carry an event type
// (internal/eventtype), written in the same transaction as the change,
// given commit-ordered positions by a sequencer, and tailed once per
// process by a Hub that Watch streams read from. Webhook delivery
// (internal/webhook) reads the same positions.
//
// Ordering without a serialisation point on the write path: writers only
// insert their audit row (as before) and, after commit, poke the local
// sequencer (store.CommitSignal). Sequencers in every process take turns on
// one row lock and position, in audit id order, the committed events their
// snapshot sees; a transaction that commits later is positioned later. So
// positions follow commit order across batches, follow the write order of
// each object (its changes hold its row lock), and a reader that has seen
// position p never later finds an event below p. Positions are contiguous,
// which lets readers tell "pruned by retention" from "nothing happened".
package events

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/eventtype"
	"github.com/gpuplane/gpuplane/internal/store"
)

// Event is one change as the feed carries it.
type Event struct {
	// Position orders the feed; resume after it.
	Position int64
	// ID is the audit event's id (auditEvents/{id}), also the id webhooks
	// deliver it under.
	ID       int64
	Type     string // e.g. "request.approved"
	Resource string // e.g. "requests/r1a2b"
	// Team and Department scope reads (ids; "" when none).
	Team, Department string
	Actor            string
	Time             time.Time
	CorrelationID    string
	// Before and After are the object as the API renders it (protojson,
	// proto field names); nil when absent (creations, deletions).
	Before, After json.RawMessage
	// Decoded is what the hub's Decode function made of the event (the
	// API's message), computed once and shared by every watcher; never
	// changed after publication.
	Decoded any
}

// Kind is the object kind ("request", "virtualcluster", ...).
func (e *Event) Kind() string { return eventtype.Kind(e.Type) }

// Object is the object's state after the change, or its last state when
// it was deleted.
func (e *Event) Object() json.RawMessage {
	if len(e.After) > 0 {
		return e.After
	}
	return e.Before
}

// Expired is the error for a position the feed no longer holds (retention)
// or never held (a database restored to an earlier point): the client must
// list again.
func Expired(position int64, b Bounds) error {
	msg := "position %d is older than the event retention (oldest kept: %d); list the objects again and watch from the position that answer gives"
	arg := b.First - 1
	if position > b.Last {
		msg = "position %d is ahead of the event feed (last: %d; was the database restored?); list the objects again"
		arg = b.Last
	}
	return errs.New(errs.KindOutOfRange, errs.ReasonEventsExpired, msg, position, arg).
		With("position", itoa(position)).With("first_position", itoa(b.First))
}

// CheckResume validates a resume position against the feed's bounds.
func CheckResume(ctx context.Context, q store.Querier, position int64) (Bounds, error) {
	if position < 0 {
		return Bounds{}, errs.InvalidField("resume_position", "must not be negative")
	}
	b, err := ReadBounds(ctx, q)
	if err != nil {
		return b, err
	}
	if position < b.First-1 || position > b.Last {
		return b, Expired(position, b)
	}
	return b, nil
}

// Waker wakes any number of waiters (hubs, dispatchers) when new events
// have positions. Wakes coalesce per waiter.
type Waker struct {
	mu   sync.Mutex
	subs map[chan struct{}]bool
}

// NewWaker returns a Waker with no waiters.
func NewWaker() *Waker { return &Waker{subs: map[chan struct{}]bool{}} }

// Subscribe returns a channel that receives after each Notify, and a
// function that unsubscribes.
func (w *Waker) Subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs[c] = true
	w.mu.Unlock()
	return c, func() {
		w.mu.Lock()
		delete(w.subs, c)
		w.mu.Unlock()
	}
}

// Notify wakes every waiter; it never blocks.
func (w *Waker) Notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// SequencerConfig tunes a Sequencer.
type SequencerConfig struct {
	// Poll is how often the sequencer looks without being woken (events
	// committed by another process whose own sequencer died); default 1s.
	Poll time.Duration
	// Batch bounds the events positioned per transaction; default 1000.
	Batch int
	// Retention is how long positions are kept; 0 keeps them forever.
	Retention time.Duration
	// PruneEvery is how often retention runs; default 1m.
	PruneEvery time.Duration
}

// MinPassInterval paces the feed's loops (sequencer, hub, webhook
// dispatcher): woken again sooner than this after a pass, a loop waits out
// the rest before the next one. An idle feed answers a commit at once; a
// busy one runs one pass per interval over everything committed meanwhile
// instead of one transaction per commit, each of which costs both the
// database and this process about as much as the change it follows.
const MinPassInterval = 5 * time.Millisecond

// Pace waits until interval has passed since last (the start of the
// previous pass), or ctx ends (false).
func Pace(ctx context.Context, last time.Time, interval time.Duration) bool {
	if d := interval - time.Since(last); d > 0 {
		return Sleep(ctx, d)
	}
	return ctx.Err() == nil
}

// Sequencer positions committed events. Run one in every process that
// writes events (API server, worker): it is woken right after local
// commits, and the row lock makes the sequencers of all processes take
// turns.
type Sequencer struct {
	db      *store.DB
	commits *store.CommitSignal
	waker   *Waker
	log     *slog.Logger
	cfg     SequencerConfig
}

// NewSequencer builds a sequencer woken by commits (the DB's commit
// signal); it wakes waker after positioning events.
func NewSequencer(db *store.DB, commits *store.CommitSignal, waker *Waker, log *slog.Logger, cfg SequencerConfig) *Sequencer {
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = time.Minute
	}
	if log == nil {
		log = slog.Default()
	}
	return &Sequencer{db: db, commits: commits, waker: waker, log: log, cfg: cfg}
}

// Run positions events until ctx ends.
func (s *Sequencer) Run(ctx context.Context) {
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	var pruneC <-chan time.Time
	if s.cfg.Retention > 0 {
		t := time.NewTicker(s.cfg.PruneEvery)
		defer t.Stop()
		pruneC = t.C
	}
	failures := 0
	for {
		started := time.Now()
		p, err := s.Pass(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			s.log.Warn("event sequencer pass failed; retrying", "error", err, "failures", failures)
			if !Sleep(ctx, backoff(failures, 50*time.Millisecond, 5*time.Second)) {
				return
			}
			continue
		}
		failures = 0
		if p.full {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.commits.C():
			if !Pace(ctx, started, MinPassInterval) {
				return
			}
		case <-poll.C:
		case <-pruneC:
			if first, err := prune(ctx, s.db, time.Now().Add(-s.cfg.Retention), 10_000); err != nil && ctx.Err() == nil {
				s.log.Warn("event retention failed", "error", err)
			} else {
				s.log.Debug("event retention", "first_position", first)
			}
		}
	}
}

// Pass runs one sequencing pass and wakes the local waiters when it
// positioned events (Run calls it; tests call it to control timing).
func (s *Sequencer) Pass(ctx context.Context) (PassResult, error) {
	p, err := sequence(ctx, s.db, s.cfg.Batch)
	if err == nil && p.positioned > 0 && s.waker != nil {
		s.waker.Notify()
	}
	return p, err
}

// Listen wakes waker whenever any process's sequencer positions events
// (PostgreSQL LISTEN on Channel, on its own connection). After a
// reconnect it wakes waker once, in case a notification was missed.
func Listen(ctx context.Context, db *store.DB, waker *Waker, log *slog.Logger) {
	failures := 0
	for ctx.Err() == nil {
		err := listenOnce(ctx, db, waker, func() { failures = 0 })
		if ctx.Err() != nil {
			return
		}
		failures++
		log.Warn("event notifications lost; reconnecting", "error", err, "failures", failures)
		waker.Notify()
		if !Sleep(ctx, backoff(failures, 100*time.Millisecond, 10*time.Second)) {
			return
		}
	}
}

func listenOnce(ctx context.Context, db *store.DB, waker *Waker, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, db.Pool().Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return err
	}
	connected()
	waker.Notify() // anything positioned while we were not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		waker.Notify()
	}
}

// backoff is exponential with equal jitter.
func backoff(attempt int, base, ceiling time.Duration) time.Duration {
	d := base << min(attempt-1, 20)
	if d > ceiling || d <= 0 {
		d = ceiling
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx ends (false). The feed's loops and the
// webhook deliverer back off with it.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ErrClosed ends watches when the server shuts down.
var ErrClosed = errors.New("events: hub closed")
