-- The W3C traceparent of the API call that last enqueued the work item, so
-- the worker's reconcile span continues that call's trace. NULL for work
-- nobody traced (resync, tracing off).
ALTER TABLE reconcile_work ADD COLUMN trace_parent text;
