DROP INDEX IF EXISTS teams_dedicated_node_pool;
ALTER TABLE teams DROP CONSTRAINT IF EXISTS teams_node_pool_matches_tier;
ALTER TABLE teams DROP COLUMN IF EXISTS node_pool;
