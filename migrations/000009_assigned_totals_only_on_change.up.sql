-- The totals trigger updated the department row for every team insert,
-- delete and quota update, even when no quota moved (a team created with
-- a zero quota, an update that keeps it). Each such update locked the
-- department row until commit and left a dead row version behind. Now
-- the row is touched only when its totals change.
CREATE OR REPLACE FUNCTION teams_assigned_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.department_id = NEW.department_id THEN
    IF (OLD.gpu_centi, OLD.cpu_millis, OLD.memory_bytes) IS DISTINCT FROM (NEW.gpu_centi, NEW.cpu_millis, NEW.memory_bytes) THEN
      UPDATE departments SET
        assigned_gpu_centi    = assigned_gpu_centi + NEW.gpu_centi - OLD.gpu_centi,
        assigned_cpu_millis   = assigned_cpu_millis + NEW.cpu_millis - OLD.cpu_millis,
        assigned_memory_bytes = assigned_memory_bytes + NEW.memory_bytes - OLD.memory_bytes
      WHERE id = NEW.department_id;
    END IF;
    RETURN NULL;
  END IF;
  IF TG_OP IN ('UPDATE', 'DELETE') AND (OLD.gpu_centi, OLD.cpu_millis, OLD.memory_bytes) <> (0, 0, 0) THEN
    UPDATE departments SET
      assigned_gpu_centi    = assigned_gpu_centi - OLD.gpu_centi,
      assigned_cpu_millis   = assigned_cpu_millis - OLD.cpu_millis,
      assigned_memory_bytes = assigned_memory_bytes - OLD.memory_bytes
    WHERE id = OLD.department_id;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') AND (NEW.gpu_centi, NEW.cpu_millis, NEW.memory_bytes) <> (0, 0, 0) THEN
    UPDATE departments SET
      assigned_gpu_centi    = assigned_gpu_centi + NEW.gpu_centi,
      assigned_cpu_millis   = assigned_cpu_millis + NEW.cpu_millis,
      assigned_memory_bytes = assigned_memory_bytes + NEW.memory_bytes
    WHERE id = NEW.department_id;
  END IF;
  RETURN NULL;
END
$$;
