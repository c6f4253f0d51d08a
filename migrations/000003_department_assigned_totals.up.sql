-- What a department has handed out to its teams, kept by a trigger so the
-- quota check reads one locked row instead of summing every team of the
-- department (which grew with the department, under its lock).
ALTER TABLE departments
  ADD COLUMN assigned_gpu_centi    bigint NOT NULL DEFAULT 0,
  ADD COLUMN assigned_cpu_millis   bigint NOT NULL DEFAULT 0,
  ADD COLUMN assigned_memory_bytes bigint NOT NULL DEFAULT 0;

UPDATE departments d SET
  assigned_gpu_centi    = s.gpu,
  assigned_cpu_millis   = s.cpu,
  assigned_memory_bytes = s.mem
FROM (SELECT department_id, SUM(gpu_centi) AS gpu, SUM(cpu_millis) AS cpu, SUM(memory_bytes) AS mem
        FROM teams GROUP BY department_id) s
WHERE s.department_id = d.id;

CREATE FUNCTION teams_assigned_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE departments SET
      assigned_gpu_centi    = assigned_gpu_centi - OLD.gpu_centi,
      assigned_cpu_millis   = assigned_cpu_millis - OLD.cpu_millis,
      assigned_memory_bytes = assigned_memory_bytes - OLD.memory_bytes
    WHERE id = OLD.department_id;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    UPDATE departments SET
      assigned_gpu_centi    = assigned_gpu_centi + NEW.gpu_centi,
      assigned_cpu_millis   = assigned_cpu_millis + NEW.cpu_millis,
      assigned_memory_bytes = assigned_memory_bytes + NEW.memory_bytes
    WHERE id = NEW.department_id;
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER teams_assigned_totals
  AFTER INSERT OR DELETE OR UPDATE OF gpu_centi, cpu_millis, memory_bytes, department_id ON teams
  FOR EACH ROW EXECUTE FUNCTION teams_assigned_totals();
