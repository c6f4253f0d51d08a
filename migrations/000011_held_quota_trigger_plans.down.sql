DROP TRIGGER IF EXISTS teams_held_quota ON teams;
CREATE TRIGGER teams_held_quota
  AFTER UPDATE OF node_pool, department_id ON teams
  FOR EACH ROW EXECUTE FUNCTION teams_held_quota();
DROP TRIGGER IF EXISTS teams_assigned_totals_insert ON teams;
DROP TRIGGER IF EXISTS teams_assigned_totals_delete ON teams;
DROP TRIGGER IF EXISTS teams_assigned_totals_update ON teams;
CREATE TRIGGER teams_assigned_totals
  AFTER INSERT OR DELETE OR UPDATE OF gpu_centi, cpu_millis, memory_bytes, department_id ON teams
  FOR EACH ROW EXECUTE FUNCTION teams_assigned_totals();
CREATE OR REPLACE FUNCTION virtual_clusters_held_quota() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  old_holds boolean := false;
  new_holds boolean := false;
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    old_holds := vc_phase_holds_quota(OLD.phase) AND (NOT OLD.sleep OR
      (SELECT d.sleeping_keeps_quota FROM teams t JOIN departments d ON d.id = t.department_id WHERE t.id = OLD.team_id));
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    new_holds := vc_phase_holds_quota(NEW.phase) AND (NOT NEW.sleep OR
      (SELECT d.sleeping_keeps_quota FROM teams t JOIN departments d ON d.id = t.department_id WHERE t.id = NEW.team_id));
  END IF;
  IF TG_OP = 'UPDATE' AND old_holds = new_holds AND (NOT new_holds OR
     ((OLD.host_cluster_id, OLD.team_id, OLD.gpu_centi, OLD.cpu_millis, OLD.memory_bytes) IS NOT DISTINCT FROM
      (NEW.host_cluster_id, NEW.team_id, NEW.gpu_centi, NEW.cpu_millis, NEW.memory_bytes))) THEN
    RETURN NULL;
  END IF;
  IF old_holds THEN
    PERFORM held_quota_add(OLD.host_cluster_id, OLD.team_id, -OLD.gpu_centi, -OLD.cpu_millis, -OLD.memory_bytes);
  END IF;
  IF new_holds THEN
    PERFORM held_quota_add(NEW.host_cluster_id, NEW.team_id, NEW.gpu_centi, NEW.cpu_millis, NEW.memory_bytes);
  END IF;
  RETURN NULL;
END
$$;
DROP FUNCTION IF EXISTS vc_reserves_quota(text, boolean, text);
