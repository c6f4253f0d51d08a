DROP INDEX IF EXISTS virtual_clusters_host_cluster;
ALTER TABLE virtual_clusters DROP CONSTRAINT IF EXISTS virtual_clusters_placed;
ALTER TABLE virtual_clusters
  DROP COLUMN IF EXISTS placement_labels,
  DROP COLUMN IF EXISTS placement_host_cluster,
  DROP COLUMN IF EXISTS host_cluster_id;
DROP TABLE IF EXISTS host_clusters;
