ALTER TABLE reconcile_work DROP COLUMN IF EXISTS trace_parent;
