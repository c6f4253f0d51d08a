-- Names are DNS-1123 labels because they become Kubernetes namespace and
-- KAI queue names; the check lives here too so no writer can bypass it.
CREATE DOMAIN dns_label AS text
  CHECK (VALUE ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$');

-- Quantities: GPUs in hundredths (0.5 GPU = 50) so sums are exact; CPU in
-- millicores; memory in bytes.
CREATE DOMAIN gpu_centi AS bigint CHECK (VALUE >= 0);
CREATE DOMAIN nonneg AS bigint CHECK (VALUE >= 0);

CREATE TABLE departments (
  id            dns_label   PRIMARY KEY,
  display_name  text        NOT NULL DEFAULT '' CHECK (length(display_name) <= 256),
  gpu_centi     gpu_centi   NOT NULL DEFAULT 0,
  cpu_millis    nonneg      NOT NULL DEFAULT 0,
  memory_bytes  nonneg      NOT NULL DEFAULT 0,
  admin_groups  text[]      NOT NULL DEFAULT '{}',
  version       bigint      NOT NULL DEFAULT 1,
  create_time   timestamptz NOT NULL DEFAULT now(),
  update_time   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX departments_admin_groups ON departments USING gin (admin_groups);

CREATE TABLE teams (
  id             dns_label   PRIMARY KEY,
  department_id  text        NOT NULL REFERENCES departments (id) ON DELETE RESTRICT,
  display_name   text        NOT NULL DEFAULT '' CHECK (length(display_name) <= 256),
  isolation_tier text        NOT NULL CHECK (isolation_tier IN ('SHARED', 'DEDICATED')),
  gpu_centi      gpu_centi   NOT NULL DEFAULT 0,
  cpu_millis     nonneg      NOT NULL DEFAULT 0,
  memory_bytes   nonneg      NOT NULL DEFAULT 0,
  version        bigint      NOT NULL DEFAULT 1,
  create_time    timestamptz NOT NULL DEFAULT now(),
  update_time    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX teams_department ON teams (department_id, id);

CREATE TABLE members (
  team_id        text        NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  id             dns_label   NOT NULL,
  principal_kind text        NOT NULL CHECK (principal_kind IN ('user', 'group')),
  principal      text        NOT NULL CHECK (length(principal) BETWEEN 1 AND 256),
  role           text        NOT NULL CHECK (role IN ('OWNER', 'MEMBER', 'VIEWER')),
  version        bigint      NOT NULL DEFAULT 1,
  create_time    timestamptz NOT NULL DEFAULT now(),
  update_time    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team_id, id),
  CONSTRAINT members_principal_unique UNIQUE (team_id, principal_kind, principal)
);
-- Authorization looks members up by principal on every call.
CREATE INDEX members_principal ON members (principal_kind, principal);

CREATE TABLE virtual_clusters (
  id                    dns_label   PRIMARY KEY,
  team_id               text        NOT NULL REFERENCES teams (id) ON DELETE RESTRICT,
  display_name          text        NOT NULL DEFAULT '' CHECK (length(display_name) <= 256),
  gpu_centi             gpu_centi   NOT NULL DEFAULT 0,
  cpu_millis            nonneg      NOT NULL DEFAULT 0,
  memory_bytes          nonneg      NOT NULL DEFAULT 0,
  limit_gpu_centi       gpu_centi,
  limit_cpu_millis      nonneg,
  limit_memory_bytes    nonneg,
  over_quota_weight     integer     NOT NULL DEFAULT 1 CHECK (over_quota_weight BETWEEN 0 AND 1000),
  priority              integer     NOT NULL DEFAULT 100 CHECK (priority BETWEEN 0 AND 1000),
  allow_fractional_gpus boolean     NOT NULL DEFAULT false,
  kubernetes_version    text        NOT NULL DEFAULT '',
  chart_version         text        NOT NULL DEFAULT '',
  expire_time           timestamptz,
  phase                 text        NOT NULL CHECK (phase IN ('PENDING_APPROVAL', 'PROVISIONING', 'READY',
                          'DEGRADED', 'DELETING', 'DELETED', 'FAILED', 'REJECTED')),
  conditions            jsonb       NOT NULL DEFAULT '[]',
  generation            bigint      NOT NULL DEFAULT 1,
  observed_generation   bigint      NOT NULL DEFAULT 0,
  endpoint              text        NOT NULL DEFAULT '',
  status_message        text        NOT NULL DEFAULT '',
  alloc_gpu_centi       gpu_centi   NOT NULL DEFAULT 0,
  alloc_cpu_millis      nonneg      NOT NULL DEFAULT 0,
  alloc_memory_bytes    nonneg      NOT NULL DEFAULT 0,
  version               bigint      NOT NULL DEFAULT 1,
  create_time           timestamptz NOT NULL DEFAULT now(),
  update_time           timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT virtual_clusters_limit_all_or_none CHECK (
    (limit_gpu_centi IS NULL) = (limit_cpu_millis IS NULL) AND
    (limit_cpu_millis IS NULL) = (limit_memory_bytes IS NULL))
);
CREATE INDEX virtual_clusters_team ON virtual_clusters (team_id, id);
CREATE INDEX virtual_clusters_expiry ON virtual_clusters (expire_time)
  WHERE expire_time IS NOT NULL AND phase NOT IN ('DELETED', 'REJECTED', 'DELETING');

CREATE TABLE approval_policies (
  id           dns_label   PRIMARY KEY,
  seq          bigserial   NOT NULL UNIQUE,
  display_name text        NOT NULL DEFAULT '' CHECK (length(display_name) <= 256),
  expression   text        NOT NULL CHECK (length(expression) BETWEEN 1 AND 4096),
  disabled     boolean     NOT NULL DEFAULT false,
  version      bigint      NOT NULL DEFAULT 1,
  create_time  timestamptz NOT NULL DEFAULT now(),
  update_time  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE requests (
  id                  text        PRIMARY KEY,
  -- Newest-first keyset pagination uses seq, which never repeats.
  seq                 bigserial   NOT NULL UNIQUE,
  team_id             text        NOT NULL REFERENCES teams (id) ON DELETE RESTRICT,
  department_id       text        NOT NULL REFERENCES departments (id) ON DELETE RESTRICT,
  kind                text        NOT NULL CHECK (kind IN ('CREATE_VIRTUAL_CLUSTER', 'CHANGE_VIRTUAL_CLUSTER_QUOTA',
                                    'CHANGE_TEAM_QUOTA', 'DELETE_VIRTUAL_CLUSTER')),
  virtual_cluster_id  text,
  payload             jsonb       NOT NULL,
  justification       text        NOT NULL DEFAULT '' CHECK (length(justification) <= 4096),
  state               text        NOT NULL CHECK (state IN ('PENDING', 'APPROVED', 'REJECTED', 'CANCELLED',
                                    'APPLIED', 'FAILED')),
  requester           text        NOT NULL,
  decider             text        NOT NULL DEFAULT '',
  decide_time         timestamptz,
  decision_reason     text        NOT NULL DEFAULT '' CHECK (length(decision_reason) <= 4096),
  approval_policy_id  text,
  -- The virtual cluster generation that carries this request; the worker
  -- marks the request APPLIED once observed_generation reaches it.
  target_generation   bigint,
  failure_message     text        NOT NULL DEFAULT '',
  version             bigint      NOT NULL DEFAULT 1,
  create_time         timestamptz NOT NULL DEFAULT now(),
  update_time         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX requests_state ON requests (state, seq DESC);
CREATE INDEX requests_team ON requests (team_id, seq DESC);
CREATE INDEX requests_department ON requests (department_id, seq DESC);
CREATE INDEX requests_vc_open ON requests (virtual_cluster_id, target_generation)
  WHERE state = 'APPROVED';
-- One pending request per virtual cluster and per team quota at a time, so
-- admins never decide on two conflicting asks.
CREATE UNIQUE INDEX requests_one_pending_per_vc ON requests (virtual_cluster_id)
  WHERE state = 'PENDING' AND virtual_cluster_id IS NOT NULL;
CREATE UNIQUE INDEX requests_one_pending_team_quota ON requests (team_id)
  WHERE state = 'PENDING' AND kind = 'CHANGE_TEAM_QUOTA';

CREATE TABLE audit_events (
  id             bigserial   PRIMARY KEY,
  time           timestamptz NOT NULL DEFAULT now(),
  actor          text        NOT NULL,
  actor_groups   text[]      NOT NULL DEFAULT '{}',
  action         text        NOT NULL,
  resource       text        NOT NULL,
  request_id     text        NOT NULL DEFAULT '',
  correlation_id text        NOT NULL DEFAULT '',
  department_id  text        NOT NULL DEFAULT '',
  team_id        text        NOT NULL DEFAULT '',
  before         jsonb,
  after          jsonb
);
CREATE INDEX audit_events_resource ON audit_events (resource text_pattern_ops, id DESC);
CREATE INDEX audit_events_actor ON audit_events (actor, id DESC);
CREATE INDEX audit_events_team ON audit_events (team_id, id DESC);
CREATE INDEX audit_events_department ON audit_events (department_id, id DESC);
CREATE INDEX audit_events_time ON audit_events (time);

-- Idempotent creates: the first response for (caller, method, request_id)
-- is stored in the same transaction as the write and replayed on retry.
CREATE TABLE idempotency_keys (
  caller       text        NOT NULL,
  method       text        NOT NULL,
  request_id   text        NOT NULL CHECK (length(request_id) BETWEEN 1 AND 128),
  request_hash bytea       NOT NULL,
  response     bytea       NOT NULL,
  create_time  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (caller, method, request_id)
);
CREATE INDEX idempotency_keys_age ON idempotency_keys (create_time);

-- The seam between the API and the worker: one row per virtual cluster that
-- needs reconciling, written in the same transaction as the change. Rows
-- coalesce (a second change just moves run_after), and the worker compares
-- generation with observed_generation so a change during a run is not lost.
CREATE TABLE reconcile_work (
  virtual_cluster_id text        PRIMARY KEY REFERENCES virtual_clusters (id) ON DELETE CASCADE,
  enqueue_time       timestamptz NOT NULL DEFAULT now(),
  run_after          timestamptz NOT NULL DEFAULT now(),
  attempts           integer     NOT NULL DEFAULT 0,
  lease_owner        text        NOT NULL DEFAULT '',
  lease_expire_time  timestamptz,
  last_error         text        NOT NULL DEFAULT ''
);
CREATE INDEX reconcile_work_due ON reconcile_work (run_after);
