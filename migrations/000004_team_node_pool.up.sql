-- Each team's node pool: "shared" for SHARED teams; for a DEDICATED team a
-- pool of its own, by default "dedicated-<team>" (names.DedicatedPool: ids
-- longer than 53 characters keep 44 and get 8 hex digits of their SHA-256).
ALTER TABLE teams ADD COLUMN node_pool text NOT NULL DEFAULT 'shared';

UPDATE teams SET node_pool = CASE
  WHEN length(id) <= 53 THEN 'dedicated-' || id
  ELSE 'dedicated-' || rtrim(left(id, 44), '-') || '-' || left(encode(sha256(convert_to(id, 'UTF8')), 'hex'), 8)
END
WHERE isolation_tier = 'DEDICATED';

ALTER TABLE teams
  ADD CONSTRAINT teams_node_pool_matches_tier CHECK ((isolation_tier = 'SHARED') = (node_pool = 'shared'));

-- A dedicated pool belongs to one team.
CREATE UNIQUE INDEX teams_dedicated_node_pool ON teams (node_pool) WHERE isolation_tier = 'DEDICATED';
