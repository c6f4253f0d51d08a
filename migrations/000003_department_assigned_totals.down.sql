DROP TRIGGER IF EXISTS teams_assigned_totals ON teams;
DROP FUNCTION IF EXISTS teams_assigned_totals();
ALTER TABLE departments
  DROP COLUMN IF EXISTS assigned_gpu_centi,
  DROP COLUMN IF EXISTS assigned_cpu_millis,
  DROP COLUMN IF EXISTS assigned_memory_bytes;
