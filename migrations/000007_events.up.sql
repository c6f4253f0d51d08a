-- The change feed (issue 13). An audit event that records a state change
-- users care about carries an event type (internal/eventtype); audit rows
-- stay append-only. A sequencer (internal/events) gives each such row a
-- commit-ordered position in event_positions: bigserial ids are handed out
-- at insert, not at commit, so "id > cursor" would skip a slower
-- transaction's event; positions are assigned only to committed rows, in
-- order, so "position > cursor" never skips one.
ALTER TABLE audit_events ADD COLUMN event_type text;

CREATE TABLE event_positions (
  position      bigint      PRIMARY KEY,
  audit_id      bigint      NOT NULL UNIQUE REFERENCES audit_events (id) ON DELETE CASCADE,
  sequence_time timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Retention deletes the oldest positions by time.
CREATE INDEX event_positions_time ON event_positions (sequence_time);

-- The sequencer's state, one row; sequencers in every process serialise on
-- its row lock (writers never touch it).
CREATE TABLE event_feed (
  singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  -- The highest position assigned.
  last_position  bigint  NOT NULL DEFAULT 0,
  -- The lowest position still kept; older ones fell out of retention.
  first_position bigint  NOT NULL DEFAULT 1,
  -- Every audit row with an id at or below low_water has a position or
  -- never committed, so the sequencer looks only above it.
  low_water      bigint  NOT NULL DEFAULT 0,
  -- The highest audit id the sequencer saw in an earlier pass, and that
  -- pass's snapshot xmax (a transaction id, as a number; 0: none): once
  -- every transaction below candidate_xmax has ended, low_water may move
  -- up to candidate_id.
  candidate_id   bigint  NOT NULL DEFAULT 0,
  candidate_xmax bigint  NOT NULL DEFAULT 0
);
-- Audit history before this migration carries no event types.
INSERT INTO event_feed (low_water) SELECT coalesce(max(id), 0) FROM audit_events;

-- Webhook subscriptions at team (team_id), department (department_id) or
-- platform scope (neither).
CREATE TABLE webhook_subscriptions (
  id                          dns_label   PRIMARY KEY,
  team_id                     text        REFERENCES teams (id) ON DELETE CASCADE,
  department_id               text        REFERENCES departments (id) ON DELETE CASCADE,
  display_name                text        NOT NULL DEFAULT '' CHECK (length(display_name) <= 256),
  url                         text        NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
  -- Event type patterns ("request.approved", "virtualcluster.*"); empty: all.
  event_types                 text[]      NOT NULL DEFAULT '{}',
  -- Standard Webhooks signing secrets ("whsec_" + base64). During a
  -- rotation the previous secret signs too, until its expire time.
  secret                      text        NOT NULL,
  previous_secret             text,
  previous_secret_expire_time timestamptz,
  disabled                    boolean     NOT NULL DEFAULT false,
  disabled_reason             text        NOT NULL DEFAULT '' CHECK (length(disabled_reason) <= 2048),
  -- Events after this position are delivered (the feed's head at creation).
  start_position              bigint      NOT NULL,
  -- Failed deliveries in a row; the subscription is disabled at the
  -- configured limit. retry_after backs the whole endpoint off.
  consecutive_failures        integer     NOT NULL DEFAULT 0,
  retry_after                 timestamptz,
  version                     bigint      NOT NULL DEFAULT 1,
  create_time                 timestamptz NOT NULL DEFAULT now(),
  update_time                 timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT webhook_subscriptions_one_scope CHECK (team_id IS NULL OR department_id IS NULL)
);
CREATE INDEX webhook_subscriptions_team ON webhook_subscriptions (team_id) WHERE team_id IS NOT NULL;
CREATE INDEX webhook_subscriptions_department ON webhook_subscriptions (department_id) WHERE department_id IS NOT NULL;

-- One row per (subscription, event): the delivery log and the delivery
-- queue. Deliverers lease rows (FOR UPDATE SKIP LOCKED) like reconcile
-- work; per object (resource) only the oldest pending event is sent.
CREATE TABLE webhook_deliveries (
  id                bigserial   PRIMARY KEY,
  subscription_id   text        NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
  position          bigint      NOT NULL,
  audit_id          bigint      NOT NULL REFERENCES audit_events (id) ON DELETE CASCADE,
  event_type        text        NOT NULL,
  resource          text        NOT NULL,
  state             text        NOT NULL DEFAULT 'PENDING' CHECK (state IN ('PENDING', 'SUCCEEDED', 'FAILED')),
  attempts          integer     NOT NULL DEFAULT 0,
  next_attempt_time timestamptz NOT NULL DEFAULT now(),
  lease_owner       text        NOT NULL DEFAULT '',
  lease_expire_time timestamptz,
  last_attempt_time timestamptz,
  last_status_code  integer     NOT NULL DEFAULT 0,
  last_error        text        NOT NULL DEFAULT '',
  last_duration_ms  integer     NOT NULL DEFAULT 0,
  create_time       timestamptz NOT NULL DEFAULT now(),
  complete_time     timestamptz,
  UNIQUE (subscription_id, position)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_time) WHERE state = 'PENDING';
CREATE INDEX webhook_deliveries_object ON webhook_deliveries (subscription_id, resource, position) WHERE state = 'PENDING';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (subscription_id, id DESC);
CREATE INDEX webhook_deliveries_age ON webhook_deliveries (create_time);

-- How far the dispatcher has turned events into deliveries.
CREATE TABLE webhook_dispatch (
  singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  last_position bigint  NOT NULL DEFAULT 0
);
INSERT INTO webhook_dispatch DEFAULT VALUES;
