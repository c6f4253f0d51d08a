-- Version-change requests cannot be represented before this migration.
DELETE FROM requests WHERE kind = 'CHANGE_VIRTUAL_CLUSTER_VERSION';
ALTER TABLE requests DROP CONSTRAINT requests_kind_check;
ALTER TABLE requests ADD CONSTRAINT requests_kind_check CHECK (kind IN ('CREATE_VIRTUAL_CLUSTER',
  'CHANGE_VIRTUAL_CLUSTER_QUOTA', 'CHANGE_TEAM_QUOTA', 'DELETE_VIRTUAL_CLUSTER'));
