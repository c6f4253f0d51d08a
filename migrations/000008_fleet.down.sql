ALTER TABLE departments DROP COLUMN IF EXISTS sleeping_keeps_quota;
DELETE FROM teams WHERE isolation_tier = 'SANDBOX' AND NOT EXISTS (SELECT 1 FROM virtual_clusters v WHERE v.team_id = teams.id);
DROP INDEX IF EXISTS teams_dedicated_node_pool;
CREATE UNIQUE INDEX teams_dedicated_node_pool ON teams (node_pool) WHERE isolation_tier = 'DEDICATED';
ALTER TABLE teams DROP CONSTRAINT teams_isolation_tier_check;
ALTER TABLE teams ADD CONSTRAINT teams_isolation_tier_check CHECK (isolation_tier IN ('SHARED', 'DEDICATED'));
ALTER TABLE virtual_clusters DROP COLUMN IF EXISTS active_time;
ALTER TABLE teams DROP COLUMN IF EXISTS auto_sleep_after_seconds;
DELETE FROM requests WHERE kind IN ('SLEEP_VIRTUAL_CLUSTER', 'WAKE_VIRTUAL_CLUSTER');
ALTER TABLE requests DROP CONSTRAINT requests_kind_check;
ALTER TABLE requests ADD CONSTRAINT requests_kind_check CHECK (kind IN ('CREATE_VIRTUAL_CLUSTER',
  'CHANGE_VIRTUAL_CLUSTER_QUOTA', 'CHANGE_TEAM_QUOTA', 'DELETE_VIRTUAL_CLUSTER', 'CHANGE_VIRTUAL_CLUSTER_VERSION'));
UPDATE virtual_clusters SET phase = 'PROVISIONING' WHERE phase = 'SLEEPING';
ALTER TABLE virtual_clusters DROP CONSTRAINT virtual_clusters_phase_check;
ALTER TABLE virtual_clusters ADD CONSTRAINT virtual_clusters_phase_check CHECK (phase IN ('PENDING_APPROVAL',
  'PROVISIONING', 'READY', 'DEGRADED', 'DELETING', 'DELETED', 'FAILED', 'REJECTED'));
ALTER TABLE virtual_clusters DROP COLUMN IF EXISTS sleep;
DROP INDEX IF EXISTS virtual_clusters_host_cluster;
ALTER TABLE virtual_clusters DROP CONSTRAINT IF EXISTS virtual_clusters_placed;
ALTER TABLE virtual_clusters
  DROP COLUMN IF EXISTS placement_labels,
  DROP COLUMN IF EXISTS placement_host_cluster,
  DROP COLUMN IF EXISTS host_cluster_id;
DROP TABLE IF EXISTS host_clusters;
