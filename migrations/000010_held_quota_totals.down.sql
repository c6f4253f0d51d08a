DROP TRIGGER IF EXISTS teams_assigned_totals_insert ON teams;
DROP TRIGGER IF EXISTS teams_assigned_totals_delete ON teams;
DROP TRIGGER IF EXISTS teams_assigned_totals_update ON teams;
CREATE TRIGGER teams_assigned_totals
  AFTER INSERT OR DELETE OR UPDATE OF gpu_centi, cpu_millis, memory_bytes, department_id ON teams
  FOR EACH ROW EXECUTE FUNCTION teams_assigned_totals();
DROP TRIGGER IF EXISTS teams_held_quota ON teams;
DROP FUNCTION IF EXISTS teams_held_quota();
DROP TRIGGER IF EXISTS departments_held_quota ON departments;
DROP FUNCTION IF EXISTS departments_held_quota();
DROP FUNCTION IF EXISTS held_quota_recount(text);
DROP TRIGGER IF EXISTS virtual_clusters_held_quota ON virtual_clusters;
DROP FUNCTION IF EXISTS virtual_clusters_held_quota();
DROP FUNCTION IF EXISTS vc_reserves_quota(text, boolean, text);
DROP FUNCTION IF EXISTS held_quota_add(text, text, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS vc_phase_holds_quota(text);
DROP TABLE IF EXISTS held_quota;
