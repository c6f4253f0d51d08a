-- Back to migration 3's trigger function, which touches the department row on every change.
CREATE OR REPLACE FUNCTION teams_assigned_totals() RETURNS trigger LANGUAGE plpgsql AS $$
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
