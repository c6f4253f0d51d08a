package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/server/api"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/webhook"
)

// feed is this process's part of the change feed (issue 13): the
// sequencer that positions the events its commits wrote, a listener that
// hears other processes' sequencers, the hub watches read from (API
// server only) and the webhook deliverer (unless --run-webhooks=false).
type feed struct {
	log       *slog.Logger
	waker     *events.Waker
	sequencer *events.Sequencer
	db        *store.DB
	hub       *events.Hub        // nil in the worker process
	deliverer *webhook.Deliverer // nil unless cfg.RunWebhooks
	urls      *webhook.URLPolicy

	stop func()
	wg   sync.WaitGroup
}

// newFeed builds the store (its commits wake the sequencer) and the feed's
// parts; nothing runs until start.
func newFeed(pool *pgxpool.Pool, cfg Config, log *slog.Logger, withHub bool) (*feed, error) {
	commits := store.NewCommitSignal()
	f := &feed{log: log, waker: events.NewWaker(), db: store.New(pool, store.WithCommitSignal(commits))}
	var err error
	if f.urls, err = webhook.NewURLPolicy(splitList(cfg.WebhookHTTPHosts), splitList(cfg.WebhookAllowedCIDRs)); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	if cfg.EventRetention < 0 {
		return nil, fmt.Errorf("invalid configuration: event-retention must not be negative")
	}
	f.sequencer = events.NewSequencer(f.db, commits, f.waker, log, events.SequencerConfig{Retention: cfg.EventRetention})
	if withHub {
		f.hub = events.NewHub(f.db, f.waker, log, events.HubConfig{MaxWatchesPerUser: cfg.WatchMaxPerUser, Decode: api.DecodeEvent})
	}
	if cfg.RunWebhooks {
		f.deliverer = webhook.NewDeliverer(f.db, f.urls, f.waker, log, webhook.Config{
			Timeout: cfg.WebhookTimeout, BackoffBase: cfg.WebhookBackoffBase, BackoffMax: cfg.WebhookBackoffMax,
			MaxAttempts: int32(cfg.WebhookMaxAttempts), DisableAfter: int32(cfg.WebhookDisableAfter),
			Retention: cfg.WebhookDeliveryHistory,
		})
	}
	return f, nil
}

// start runs the parts until shutdown; they outlive ctx's cancellation
// until shutdown is called, so watches and deliveries end in order.
func (f *feed) start(ctx context.Context) {
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = cancel
	run := func(fn func(context.Context)) {
		f.wg.Add(1)
		go func() { defer f.wg.Done(); fn(bg) }()
	}
	run(f.sequencer.Run)
	run(func(ctx context.Context) { events.Listen(ctx, f.db, f.waker, f.log) })
	if f.hub != nil {
		run(f.hub.Run)
	}
	if f.deliverer != nil {
		run(f.deliverer.Run)
	}
}

// closeWatches ends every watch (each with the position to resume from)
// and refuses new ones: the first step of a graceful stop.
func (f *feed) closeWatches() {
	if f.hub != nil {
		f.hub.Close()
	}
}

// shutdown stops every part; deliveries in flight finish first.
func (f *feed) shutdown() {
	f.closeWatches()
	if f.stop != nil {
		f.stop()
		f.wg.Wait()
		f.stop = nil
	}
}
