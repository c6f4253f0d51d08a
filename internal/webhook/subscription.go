// Package webhook delivers the change feed (internal/events) to other
// systems: subscriptions at team, department or platform scope, a
// dispatcher that turns each event into one delivery per matching
// subscription, and deliverers that lease deliveries (like reconcile work),
// POST them as CloudEvents 1.0 structured JSON signed per Standard
// Webhooks, retry with exponential backoff, keep each object's events in
// order, and disable a subscription after a run of failures. URLs are
// checked against server-side request forgery when set and again on every
// connection (urlpolicy.go).
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/eventtype"
	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
)

// Collection is the API collection of subscriptions.
const Collection = "webhookSubscriptions"

// Name is the resource name of subscription id.
func Name(id string) string { return Collection + "/" + id }

// ParseName parses "webhookSubscriptions/{id}".
func ParseName(field, name string) (string, error) {
	parts, err := names.Parse(field, name, Collection)
	if err != nil {
		return "", err
	}
	return parts[0], nil
}

// Subscription is a stored webhook subscription.
type Subscription struct {
	ID string
	// Scope: Team (with its Department), Department alone, or neither
	// (platform).
	Team, Department string
	DisplayName      string
	URL              string
	EventTypes       []string
	// Secret signs every delivery; PreviousSecret too until
	// PreviousSecretExpire (a rotation).
	Secret               string
	PreviousSecret       string
	PreviousSecretExpire *time.Time
	Disabled             bool
	DisabledReason       string
	StartPosition        int64
	ConsecutiveFailures  int32
	RetryAfter           *time.Time
	Version              int64
	Created, Updated     time.Time
}

// Name is the API resource name.
func (s Subscription) Name() string { return Name(s.ID) }

// Etag of the current version.
func (s Subscription) Etag() string { return store.Etag(s.Version, s.Updated) }

// Secrets are the secrets that sign a delivery at now.
func (s Subscription) Secrets(now time.Time) []string {
	out := []string{s.Secret}
	if s.PreviousSecret != "" && s.PreviousSecretExpire != nil && now.Before(*s.PreviousSecretExpire) {
		out = append(out, s.PreviousSecret)
	}
	return out
}

type subscriptionJSON struct {
	Name                     string          `json:"name,omitempty"`
	Team                     string          `json:"team,omitempty"`
	Department               string          `json:"department,omitempty"`
	DisplayName              string          `json:"display_name,omitempty"`
	URL                      string          `json:"url,omitempty"`
	EventTypes               []string        `json:"event_types,omitempty"`
	Disabled                 bool            `json:"disabled,omitempty"`
	DisabledReason           string          `json:"disabled_reason,omitempty"`
	PreviousSecretExpireTime *jsonshape.Time `json:"previous_secret_expire_time,omitempty"`
	ConsecutiveFailures      int32           `json:"consecutive_failures,omitempty"`
	StartPosition            jsonshape.Int64 `json:"start_position,omitempty"`
	Etag                     string          `json:"etag,omitempty"`
	CreateTime               *jsonshape.Time `json:"create_time,omitempty"`
	UpdateTime               *jsonshape.Time `json:"update_time,omitempty"`
}

// Snapshot renders s as the API does (the WebhookSubscription message
// without its secret: audit events and the change feed never carry it).
func (s Subscription) Snapshot() any {
	j := subscriptionJSON{Name: s.Name(), DisplayName: s.DisplayName, URL: s.URL, EventTypes: s.EventTypes,
		Disabled: s.Disabled, DisabledReason: s.DisabledReason, PreviousSecretExpireTime: jsonshape.At(s.PreviousSecretExpire),
		ConsecutiveFailures: s.ConsecutiveFailures, StartPosition: jsonshape.Int64(s.StartPosition), Etag: s.Etag(),
		CreateTime: &jsonshape.Time{Time: s.Created}, UpdateTime: &jsonshape.Time{Time: s.Updated}}
	if s.Team != "" {
		j.Team = names.Team(s.Team)
	} else if s.Department != "" {
		j.Department = names.Department(s.Department)
	}
	return j
}

// NewSecret makes a signing secret: "whsec_" and the base64 of 32 random
// bytes (Standard Webhooks).
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// ValidateEventTypes checks subscription filters (eventtype patterns).
func ValidateEventTypes(v *errs.Violations, field string, patterns []string) {
	if len(patterns) > 64 {
		v.Add(field, "at most 64 patterns")
	}
	for i, p := range patterns {
		if err := eventtype.ValidPattern(p); err != nil {
			v.Add(field+"["+itoa(int64(i))+"]", "%v", err)
		}
	}
}

func record(ctx context.Context, tx *store.Tx, actor reqctx.Principal, action, requestID string, s Subscription, before, after any) error {
	return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: action, Resource: s.Name(), RequestID: requestID,
		Department: s.Department, Team: s.Team, Before: before, After: after})
}

// Create stores a new subscription that starts after the feed's current
// last position, with a fresh secret.
func Create(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, s Subscription) (Subscription, error) {
	// Ordered with dispatch passes (lockDispatchShared): a pass that began
	// before this one commits has not seen the subscription, so the start
	// must be read after that pass ended, or the events it moved past
	// would be neither before the start nor delivered.
	if err := lockDispatchShared(ctx, tx); err != nil {
		return s, err
	}
	head, err := feedHead(ctx, tx)
	if err != nil {
		return s, err
	}
	s.StartPosition, s.Secret = head, NewSecret()
	row, err := insert(ctx, tx, s)
	if err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "CreateWebhookSubscription", requestID, row, nil, row.Snapshot())
}

// Update locks the subscription, checks etag, lets change edit a copy and
// stores it. Enabling a disabled subscription resets its failure count
// and makes its waiting deliveries due at once.
func Update(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string, change func(*Subscription)) (Subscription, error) {
	cur, err := Get(ctx, tx, id, true)
	if err != nil {
		return cur, err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return cur, err
	}
	next := cur
	change(&next)
	if cur.Disabled && !next.Disabled {
		next.DisabledReason, next.ConsecutiveFailures, next.RetryAfter = "", 0, nil
		if err := retryNow(ctx, tx, id); err != nil {
			return cur, err
		}
	}
	row, err := update(ctx, tx, next)
	if err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "UpdateWebhookSubscription", "", row, cur.Snapshot(), row.Snapshot())
}

// Delete deletes a subscription and its delivery log.
func Delete(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string) error {
	cur, err := Get(ctx, tx, id, true)
	if err != nil {
		return err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return err
	}
	if err := deleteSubscription(ctx, tx, id); err != nil {
		return err
	}
	return record(ctx, tx, actor, "DeleteWebhookSubscription", "", cur, cur.Snapshot(), nil)
}

// Rotate gives the subscription a new secret; the current one signs too
// for ttl.
func Rotate(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string, ttl time.Duration, now time.Time) (Subscription, error) {
	cur, err := Get(ctx, tx, id, true)
	if err != nil {
		return cur, err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return cur, err
	}
	next := cur
	until := now.Add(ttl)
	next.PreviousSecret, next.PreviousSecretExpire, next.Secret = cur.Secret, &until, NewSecret()
	row, err := update(ctx, tx, next)
	if err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "RotateWebhookSecret", "", row, cur.Snapshot(), row.Snapshot())
}
