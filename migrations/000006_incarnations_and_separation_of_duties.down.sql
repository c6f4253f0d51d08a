ALTER TABLE departments DROP COLUMN IF EXISTS requester_cannot_decide;

DROP INDEX IF EXISTS audit_events_resource_uid;
DROP INDEX IF EXISTS audit_events_department_uid;
DROP INDEX IF EXISTS audit_events_team_uid;
ALTER TABLE audit_events
  DROP COLUMN IF EXISTS resource_uid,
  DROP COLUMN IF EXISTS team_uid,
  DROP COLUMN IF EXISTS department_uid;

-- Before this migration an id named one row: keep the newest incarnation
-- of each id (the audit log keeps the others' history).
DELETE FROM virtual_clusters v USING virtual_clusters newer
  WHERE newer.id = v.id AND (newer.create_time, newer.uid) > (v.create_time, v.uid);
DROP INDEX IF EXISTS virtual_clusters_id_team;
DROP INDEX IF EXISTS virtual_clusters_live_id;
ALTER TABLE virtual_clusters DROP CONSTRAINT virtual_clusters_pkey;
ALTER TABLE virtual_clusters ADD CONSTRAINT virtual_clusters_pkey PRIMARY KEY (id);
DELETE FROM reconcile_work w WHERE NOT EXISTS (SELECT 1 FROM virtual_clusters v WHERE v.id = w.virtual_cluster_id);
ALTER TABLE reconcile_work ADD CONSTRAINT reconcile_work_virtual_cluster_id_fkey
  FOREIGN KEY (virtual_cluster_id) REFERENCES virtual_clusters (id) ON DELETE CASCADE;
ALTER TABLE virtual_clusters DROP COLUMN uid;

ALTER TABLE teams DROP CONSTRAINT IF EXISTS teams_uid_key;
ALTER TABLE teams DROP COLUMN IF EXISTS uid;
ALTER TABLE departments DROP CONSTRAINT IF EXISTS departments_uid_key;
ALTER TABLE departments DROP COLUMN IF EXISTS uid;
