-- What the virtual clusters of each team hold on each host cluster, kept
-- by triggers, so that the fit checks of approvals, placements and resizes
-- read a few rows instead of summing every virtual cluster of a team or a
-- host pool (which grew with the fleet, under the department lock).
--
-- A virtual cluster holds its quota when its phase does (see
-- vc_phase_holds_quota) and it is awake or its department keeps sleeping
-- virtual clusters' quota. Every such virtual cluster is placed, so each
-- holds on exactly one host cluster. One row per (host cluster, team)
-- carries the team's department and node pool, so the same rows sum to:
--   a team's total              (WHERE team_id = ...),
--   a host cluster's node pool  (WHERE host_cluster_id = ... AND node_pool = ...),
--   a department on a host      (WHERE host_cluster_id = ... AND department_id = ...).
-- Writers of one team lock only that team's rows, so departments never
-- wait for each other here.
CREATE TABLE held_quota (
  host_cluster_id text   NOT NULL REFERENCES host_clusters (id) ON DELETE CASCADE,
  team_id         text   NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
  department_id   text   NOT NULL,
  node_pool       text   NOT NULL,
  gpu_centi       bigint NOT NULL DEFAULT 0,
  cpu_millis      bigint NOT NULL DEFAULT 0,
  memory_bytes    bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (host_cluster_id, team_id)
);
CREATE INDEX held_quota_team ON held_quota (team_id);
CREATE INDEX held_quota_host_pool ON held_quota (host_cluster_id, node_pool);
CREATE INDEX held_quota_host_department ON held_quota (host_cluster_id, department_id);

-- The phases whose virtual clusters hold quota: virtualcluster.Phase
-- HoldsQuota (a test keeps the two equal).
CREATE FUNCTION vc_phase_holds_quota(phase text) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT phase IN ('PROVISIONING', 'READY', 'DEGRADED', 'DELETING', 'FAILED', 'SLEEPING') $$;

-- held_quota_add adds (or, negative, removes) one virtual cluster's quota
-- on its host cluster for its team.
CREATE FUNCTION held_quota_add(host text, team text, gpu bigint, cpu bigint, mem bigint) RETURNS void
  LANGUAGE plpgsql AS $$
BEGIN
  IF host IS NULL OR (gpu, cpu, mem) = (0, 0, 0) THEN
    RETURN;
  END IF;
  INSERT INTO held_quota AS h (host_cluster_id, team_id, department_id, node_pool, gpu_centi, cpu_millis, memory_bytes)
  SELECT host, t.id, t.department_id, t.node_pool, gpu, cpu, mem FROM teams t WHERE t.id = team
  ON CONFLICT (host_cluster_id, team_id) DO UPDATE SET
    gpu_centi    = h.gpu_centi + EXCLUDED.gpu_centi,
    cpu_millis   = h.cpu_millis + EXCLUDED.cpu_millis,
    memory_bytes = h.memory_bytes + EXCLUDED.memory_bytes;
END
$$;

-- vc_reserves_quota is whether a virtual cluster holds its quota. In
-- PL/pgSQL control flow rather than one SQL expression: the phase rule, an
-- inlined function, folds to a constant under a custom plan, so an
-- expression holding it and a subquery would be planned again on every row
-- (most of what an approval's update of the virtual cluster would cost);
-- here it is a cached simple expression, and the department is read only
-- for a sleeping virtual cluster.
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

CREATE FUNCTION virtual_clusters_held_quota() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- Status writes (conditions, messages, allocation) do not fire it.
CREATE TRIGGER virtual_clusters_held_quota
  AFTER INSERT OR DELETE OR UPDATE OF phase, sleep, gpu_centi, cpu_millis, memory_bytes, host_cluster_id, team_id
  ON virtual_clusters FOR EACH ROW EXECUTE FUNCTION virtual_clusters_held_quota();

-- held_quota_recount recomputes the rows of the teams of one department
-- from the virtual clusters (when which of them hold quota changes for all
-- at once).
CREATE FUNCTION held_quota_recount(dept text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM held_quota WHERE department_id = dept;
  INSERT INTO held_quota (host_cluster_id, team_id, department_id, node_pool, gpu_centi, cpu_millis, memory_bytes)
  SELECT v.host_cluster_id, t.id, t.department_id, t.node_pool,
         SUM(v.gpu_centi), SUM(v.cpu_millis), SUM(v.memory_bytes)
    FROM virtual_clusters v
    JOIN teams t ON t.id = v.team_id
    JOIN departments d ON d.id = t.department_id
   WHERE d.id = dept AND v.host_cluster_id IS NOT NULL
     AND vc_phase_holds_quota(v.phase) AND (NOT v.sleep OR d.sleeping_keeps_quota)
   GROUP BY v.host_cluster_id, t.id, t.department_id, t.node_pool;
END
$$;

CREATE FUNCTION departments_held_quota() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.sleeping_keeps_quota IS DISTINCT FROM NEW.sleeping_keeps_quota THEN
    PERFORM held_quota_recount(NEW.id);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER departments_held_quota
  AFTER UPDATE OF sleeping_keeps_quota ON departments
  FOR EACH ROW EXECUTE FUNCTION departments_held_quota();

-- A team that moves to another node pool takes what it holds along.
CREATE FUNCTION teams_held_quota() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.node_pool IS DISTINCT FROM NEW.node_pool OR OLD.department_id IS DISTINCT FROM NEW.department_id THEN
    UPDATE held_quota SET node_pool = NEW.node_pool, department_id = NEW.department_id WHERE team_id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER teams_held_quota AFTER UPDATE OF node_pool, department_id ON teams FOR EACH ROW
  WHEN ((OLD.node_pool, OLD.department_id) IS DISTINCT FROM (NEW.node_pool, NEW.department_id))
  EXECUTE FUNCTION teams_held_quota();

-- The department totals trigger (migrations 3 and 9) fires only when
-- what it tracks changes: an update that sets a column to the value it had
-- (every team update names them all) no longer calls PL/pgSQL to find that
-- out, nor does a team created or deleted without quota.
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

-- What already holds quota.
SELECT held_quota_recount(id) FROM departments;
