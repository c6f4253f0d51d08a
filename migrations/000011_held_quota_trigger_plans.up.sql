-- The held_quota trigger (migration 10) decided "holds quota" in one SQL
-- expression with a subquery; PostgreSQL planned it again on every row
-- (the phase rule, an inlined function, folds to a constant under a
-- custom plan, so the cached generic plan never won), which was most of
-- what an approval's virtual cluster update cost. The same rule in
-- PL/pgSQL control flow is a cached simple expression, and the department
-- is read only for a sleeping virtual cluster.
CREATE FUNCTION vc_reserves_quota(phase text, sleep boolean, team text) RETURNS boolean
  LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT vc_phase_holds_quota(phase) THEN
    RETURN false;
  END IF;
  IF NOT sleep THEN
    RETURN true;
  END IF;
  RETURN (SELECT d.sleeping_keeps_quota FROM teams t JOIN departments d ON d.id = t.department_id WHERE t.id = team);
END
$$;

CREATE OR REPLACE FUNCTION virtual_clusters_held_quota() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  old_holds boolean := false;
  new_holds boolean := false;
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    old_holds := vc_reserves_quota(OLD.phase, OLD.sleep, OLD.team_id);
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    new_holds := vc_reserves_quota(NEW.phase, NEW.sleep, NEW.team_id);
  END IF;
  IF TG_OP = 'UPDATE' AND old_holds = new_holds AND (NOT new_holds OR
     ((OLD.host_cluster_id, OLD.team_id, OLD.gpu_centi, OLD.cpu_millis, OLD.memory_bytes) IS NOT DISTINCT FROM
      (NEW.host_cluster_id, NEW.team_id, NEW.gpu_centi, NEW.cpu_millis, NEW.memory_bytes))) THEN
    RETURN NULL; -- what it holds, and where, did not change
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

-- Triggers on teams fire only when what they track changes: an update
-- that sets a column to the value it had (every team update names them
-- all) no longer calls PL/pgSQL to find that out, nor does a team created
-- or deleted without quota.
DROP TRIGGER teams_assigned_totals ON teams;
CREATE TRIGGER teams_assigned_totals_insert AFTER INSERT ON teams FOR EACH ROW
  WHEN ((NEW.gpu_centi, NEW.cpu_millis, NEW.memory_bytes) <> (0, 0, 0))
  EXECUTE FUNCTION teams_assigned_totals();
CREATE TRIGGER teams_assigned_totals_delete AFTER DELETE ON teams FOR EACH ROW
  WHEN ((OLD.gpu_centi, OLD.cpu_millis, OLD.memory_bytes) <> (0, 0, 0))
  EXECUTE FUNCTION teams_assigned_totals();
CREATE TRIGGER teams_assigned_totals_update AFTER UPDATE OF gpu_centi, cpu_millis, memory_bytes, department_id ON teams FOR EACH ROW
  WHEN ((OLD.gpu_centi, OLD.cpu_millis, OLD.memory_bytes, OLD.department_id) IS DISTINCT FROM
        (NEW.gpu_centi, NEW.cpu_millis, NEW.memory_bytes, NEW.department_id))
  EXECUTE FUNCTION teams_assigned_totals();

DROP TRIGGER teams_held_quota ON teams;
CREATE TRIGGER teams_held_quota AFTER UPDATE OF node_pool, department_id ON teams FOR EACH ROW
  WHEN ((OLD.node_pool, OLD.department_id) IS DISTINCT FROM (NEW.node_pool, NEW.department_id))
  EXECUTE FUNCTION teams_held_quota();
