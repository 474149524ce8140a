-- 0011: the trace a request or a load belongs to, when traces are on (docs/observability.md,
-- "Traces"): 32 lowercase hex digits, or NULL. The WebUI links it to the trace viewer named by
-- observability.trace_url.

ALTER TABLE analytics_events ADD COLUMN trace_id TEXT;
ALTER TABLE load_attempts ADD COLUMN trace_id TEXT;
