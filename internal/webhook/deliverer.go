package webhook

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
)

// Config tunes a Deliverer; zero fields take the defaults.
type Config struct {
	// Source is the CloudEvents source attribute (default "/gpuplane").
	Source string
	// Concurrency bounds the deliveries in flight in this process (8).
	Concurrency int
	// Timeout bounds one attempt (10s); Lease is how long a claimed
	// delivery stays with this process (60s; longer than Timeout): a
	// deliverer killed mid-attempt leaves it to another after that.
	Timeout, Lease time.Duration
	// Backoff of retries: BackoffBase doubled per failed attempt, at most
	// BackoffMax (5s, 1h), with jitter; the subscription backs off the same
	// way per failure in a row.
	BackoffBase, BackoffMax time.Duration
	// MaxAttempts of one delivery before it is FAILED (12).
	MaxAttempts int32
	// DisableAfter failures in a row disable the subscription (15; -1:
	// never).
	DisableAfter int32
	// Poll is how often due deliveries are looked for without a wake-up
	// (1s): retries, and deliveries other processes created.
	Poll time.Duration
	// Retention of finished deliveries in the delivery log (7 days).
	Retention time.Duration
	// Owner names this process's leases (default: host, pid, random).
	Owner string
}

func (c *Config) defaults() {
	if c.Source == "" {
		c.Source = "/gpuplane"
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Lease <= c.Timeout {
		c.Lease = max(60*time.Second, 2*c.Timeout)
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 5 * time.Second
	}
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = max(time.Hour, c.BackoffBase)
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 12
	}
	if c.DisableAfter == 0 {
		c.DisableAfter = 15
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = cryptoRead(b[:])
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
}

var cryptoRead = crand.Read

var system = reqctx.System("webhooks")

// Deliverer turns events into deliveries (the dispatcher) and sends them.
// Run one in every worker process; they share the work through leases.
type Deliverer struct {
	db     *store.DB
	policy *URLPolicy
	client *http.Client
	waker  *events.Waker
	log    *slog.Logger
	cfg    Config
	kick   chan struct{}
}

// NewDeliverer builds a deliverer; waker wakes it when events are
// positioned (events.Listen and the local sequencer notify it).
func NewDeliverer(db *store.DB, policy *URLPolicy, waker *events.Waker, log *slog.Logger, cfg Config) *Deliverer {
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	return &Deliverer{db: db, policy: policy, client: policy.Client(cfg.Timeout), waker: waker, log: log, cfg: cfg,
		kick: make(chan struct{}, 1)}
}

// Run dispatches and delivers until ctx ends; attempts in flight then
// finish (each within Timeout).
func (d *Deliverer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.dispatchLoop(ctx) }()
	d.deliverLoop(ctx)
	wg.Wait()
}

func (d *Deliverer) wakeDeliveries() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *Deliverer) dispatchLoop(ctx context.Context) {
	wake, unsubscribe := d.waker.Subscribe()
	defer unsubscribe()
	poll := time.NewTicker(d.cfg.Poll)
	defer poll.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	failures := 0
	for {
		started := time.Now()
		created, full, err := d.Dispatch(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			d.log.Warn("webhook dispatch failed; retrying", "error", err, "failures", failures)
			if !events.Sleep(ctx, jitter(min(time.Duration(failures)*100*time.Millisecond, 5*time.Second))) {
				return
			}
			continue
		}
		failures = 0
		if created > 0 {
			d.wakeDeliveries()
		}
		if full {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
			if !events.Pace(ctx, started, events.MinPassInterval) {
				return
			}
		case <-poll.C:
		case <-prune.C:
			if n, err := pruneDeliveries(ctx, d.db, time.Now().Add(-d.cfg.Retention)); err != nil && ctx.Err() == nil {
				d.log.Warn("pruning the webhook delivery log failed", "error", err)
			} else if n > 0 {
				d.log.Info("pruned the webhook delivery log", "deleted", n)
			}
		}
	}
}

// Dispatch creates the deliveries of the next events (tests call it to
// control timing); it returns how many it created and whether more events
// wait.
func (d *Deliverer) Dispatch(ctx context.Context) (int, bool, error) {
	return dispatch(ctx, d.db, 500, func(from, to int64) {
		d.log.Error("events fell out of retention before webhooks were created for them; they are not delivered",
			"from_position", from, "to_position", to)
	})
}

func (d *Deliverer) deliverLoop(ctx context.Context) {
	poll := time.NewTicker(d.cfg.Poll)
	defer poll.Stop()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	slots := make(chan struct{}, d.cfg.Concurrency)
	for {
		if free := cap(slots) - len(slots); free > 0 && ctx.Err() == nil {
			claimed, err := claim(ctx, d.db, d.cfg.Owner, d.cfg.Lease, free)
			if err != nil && ctx.Err() == nil {
				d.log.Warn("claiming webhook deliveries failed", "error", err)
			}
			for _, del := range claimed {
				slots <- struct{}{}
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					// An attempt under way finishes even while shutting down,
					// so its outcome is recorded rather than retried.
					d.attempt(context.WithoutCancel(ctx), del)
					<-slots
					d.wakeDeliveries()
				}()
			}
			if len(claimed) == free {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-poll.C:
		}
	}
}

// attempt sends one delivery and records the outcome.
func (d *Deliverer) attempt(ctx context.Context, del Delivery) {
	sub, err := Get(ctx, d.db, del.Subscription, false)
	if errs.KindOf(err) == errs.KindNotFound {
		return // deleted meanwhile, its deliveries with it
	}
	var o outcome
	if err != nil {
		o = outcome{err: "reading the subscription: " + err.Error()}
	} else {
		o = d.send(ctx, sub, del)
	}
	if !o.ok {
		o.retryIn = jitter(backoff(del.Attempts, d.cfg.BackoffBase, d.cfg.BackoffMax))
		o.giveUp = del.Attempts >= d.cfg.MaxAttempts
	}
	err = d.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		held, err := finish(ctx, tx, del, d.cfg.Owner, o)
		if err != nil || !held {
			return err
		}
		if o.ok {
			return succeeded(ctx, tx, del.Subscription)
		}
		reason := func(n int32) string {
			return truncate(fmt.Sprintf("disabled after %d failed deliveries in a row; the last: %s", n, o.err), 2000)
		}
		after, disabled, err := failed(ctx, tx, del.Subscription, func(n int32) time.Duration {
			return jitter(backoff(n, d.cfg.BackoffBase, d.cfg.BackoffMax))
		}, d.cfg.DisableAfter, reason)
		if err != nil || !disabled {
			return err
		}
		d.log.Warn("webhook subscription disabled", "subscription", after.Name(), "reason", after.DisabledReason)
		return audit.Record(ctx, tx, audit.Event{Actor: system, Action: "DisableWebhookSubscription", Resource: after.Name(),
			Department: after.Department, Team: after.Team, Before: sub.Snapshot(), After: after.Snapshot()})
	})
	if err != nil {
		d.log.Warn("recording a webhook delivery failed; it is retried when its lease expires",
			"delivery", del.Name(), "error", err)
	}
}

// send makes one attempt.
func (d *Deliverer) send(ctx context.Context, sub Subscription, del Delivery) outcome {
	if err := d.policy.CheckForm("url", sub.URL); err != nil {
		msg := err.Error()
		if e, ok := errs.As(err); ok {
			msg = e.PublicMessage()
		}
		return outcome{err: "the URL is no longer allowed: " + msg}
	}
	e, err := events.ReadAt(ctx, d.db, del.EventID, del.Position)
	if err != nil {
		return outcome{err: "reading the event: " + err.Error()}
	}
	body, err := CloudEvent(d.cfg.Source, e)
	if err != nil {
		return outcome{err: "building the CloudEvent: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.URL, bytes.NewReader(body))
	if err != nil {
		return outcome{err: err.Error()}
	}
	now := time.Now()
	if err := SetHeaders(req.Header, sub.Secrets(now), strconv.FormatInt(e.ID, 10), now, body); err != nil {
		return outcome{err: err.Error()}
	}
	req.Header.Set("User-Agent", "gpuplane-webhooks/1")
	start := time.Now()
	resp, err := d.client.Do(req)
	o := outcome{duration: time.Since(start)}
	if err != nil {
		o.err = err.Error()
		return o
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	o.statusCode = resp.StatusCode
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		o.ok = true
		return o
	}
	o.err = fmt.Sprintf("HTTP %d", resp.StatusCode)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		o.err += " (redirects are not followed)"
	}
	if s := strings.TrimSpace(string(snippet)); s != "" {
		o.err += ": " + oneLine(s)
	}
	return o
}

func backoff(attempt int32, base, ceiling time.Duration) time.Duration {
	d := base << min(max(attempt-1, 0), 30)
	if d > ceiling || d <= 0 {
		return ceiling
	}
	return d
}

// jitter is "equal jitter": half fixed, half random.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + mrand.N(d/2+1)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
