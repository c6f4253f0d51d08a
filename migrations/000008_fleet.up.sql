-- Many host clusters (issue 14). A host cluster is a Kubernetes cluster with
-- GPUs that hosts virtual clusters; platform admins register them. The
-- worker observes each one (health, versions, capacity per node pool) and
-- writes the status columns without touching version, so an admin's etag
-- stays valid while the status moves.
CREATE TABLE host_clusters (
  id                    dns_label   PRIMARY KEY,
  display_name          text        NOT NULL DEFAULT '' CHECK (length(display_name) <= 256),
  -- How gpuplane reaches it: in_cluster is the cluster gpuplane runs in (or
  -- its --kubeconfig); otherwise a kubeconfig in a Secret of gpuplane's
  -- own namespace.
  in_cluster            boolean     NOT NULL DEFAULT false,
  kubeconfig_secret     text        NOT NULL DEFAULT '',
  kubeconfig_secret_key text        NOT NULL DEFAULT '',
  tiers                 text[]      NOT NULL DEFAULT '{}',
  labels                jsonb       NOT NULL DEFAULT '{}',
  -- A cordoned cluster keeps its virtual clusters but gets no new ones.
  cordoned              boolean     NOT NULL DEFAULT false,
  version               bigint      NOT NULL DEFAULT 1,
  create_time           timestamptz NOT NULL DEFAULT now(),
  update_time           timestamptz NOT NULL DEFAULT now(),
  -- Observed by the worker.
  reachable             boolean     NOT NULL DEFAULT false,
  kubernetes_version    text        NOT NULL DEFAULT '',
  kai_version           text        NOT NULL DEFAULT '',
  node_pools            jsonb       NOT NULL DEFAULT '[]',
  conditions            jsonb       NOT NULL DEFAULT '[]',
  status_message        text        NOT NULL DEFAULT '',
  observe_time          timestamptz,
  unreachable_since     timestamptz,
  CONSTRAINT host_clusters_connection CHECK (in_cluster = (kubeconfig_secret = '')),
  CONSTRAINT host_clusters_tiers CHECK (tiers <@ ARRAY['SHARED', 'DEDICATED', 'SANDBOX']::text[])
);
-- Only one host cluster can be the one gpuplane runs in.
CREATE UNIQUE INDEX host_clusters_one_in_cluster ON host_clusters (in_cluster) WHERE in_cluster;

-- Existing installs keep working: the cluster they were configured with
-- becomes host cluster "default" and hosts every virtual cluster placed so far.
INSERT INTO host_clusters (id, display_name, in_cluster, tiers)
VALUES ('default', 'The cluster gpuplane runs in (or its --kubeconfig)', true, ARRAY['SHARED', 'DEDICATED', 'SANDBOX']);

-- Where a virtual cluster runs (set when its create request is approved) and
-- what its request asked for (a cluster by name, or labels it must carry).
ALTER TABLE virtual_clusters
  ADD COLUMN host_cluster_id        text REFERENCES host_clusters (id) ON DELETE RESTRICT,
  ADD COLUMN placement_host_cluster text  NOT NULL DEFAULT '',
  ADD COLUMN placement_labels       jsonb NOT NULL DEFAULT '{}';
UPDATE virtual_clusters SET host_cluster_id = 'default' WHERE phase NOT IN ('PENDING_APPROVAL', 'REJECTED');
ALTER TABLE virtual_clusters ADD CONSTRAINT virtual_clusters_placed
  CHECK (host_cluster_id IS NOT NULL OR phase IN ('PENDING_APPROVAL', 'REJECTED', 'DELETED'));
CREATE INDEX virtual_clusters_host_cluster ON virtual_clusters (host_cluster_id, id);

-- Sleep and wake (issue 14). spec.sleep is the desired state (part of the
-- generation); SLEEPING is the phase once the host shows it asleep.
ALTER TABLE virtual_clusters ADD COLUMN sleep boolean NOT NULL DEFAULT false;
ALTER TABLE virtual_clusters DROP CONSTRAINT virtual_clusters_phase_check;
ALTER TABLE virtual_clusters ADD CONSTRAINT virtual_clusters_phase_check CHECK (phase IN ('PENDING_APPROVAL',
  'PROVISIONING', 'READY', 'DEGRADED', 'DELETING', 'DELETED', 'FAILED', 'REJECTED', 'SLEEPING'));
ALTER TABLE requests DROP CONSTRAINT requests_kind_check;
ALTER TABLE requests ADD CONSTRAINT requests_kind_check CHECK (kind IN ('CREATE_VIRTUAL_CLUSTER',
  'CHANGE_VIRTUAL_CLUSTER_QUOTA', 'CHANGE_TEAM_QUOTA', 'DELETE_VIRTUAL_CLUSTER', 'CHANGE_VIRTUAL_CLUSTER_VERSION',
  'SLEEP_VIRTUAL_CLUSTER', 'WAKE_VIRTUAL_CLUSTER'));

-- Auto-sleep (issue 14): a team's virtual clusters idle this long go to
-- sleep (0: never). active_time is the last sign of use: GPUs allocated in
-- its leaf queue, a kubeconfig handed out, a wake or a change.
ALTER TABLE teams ADD COLUMN auto_sleep_after_seconds bigint NOT NULL DEFAULT 0
  CHECK (auto_sleep_after_seconds = 0 OR auto_sleep_after_seconds BETWEEN 600 AND 2592000);
ALTER TABLE virtual_clusters ADD COLUMN active_time timestamptz NOT NULL DEFAULT now();

-- The SANDBOX tier (issue 14): a node slice of the team's own, like a
-- DEDICATED pool, where the virtual cluster runs its own scheduler.
ALTER TABLE teams DROP CONSTRAINT teams_isolation_tier_check;
ALTER TABLE teams ADD CONSTRAINT teams_isolation_tier_check CHECK (isolation_tier IN ('SHARED', 'DEDICATED', 'SANDBOX'));
DROP INDEX teams_dedicated_node_pool;
CREATE UNIQUE INDEX teams_dedicated_node_pool ON teams (node_pool) WHERE isolation_tier IN ('DEDICATED', 'SANDBOX');

-- Whether a sleeping virtual cluster keeps its quota reserved (issue 14).
ALTER TABLE departments ADD COLUMN sleeping_keeps_quota boolean NOT NULL DEFAULT true;
