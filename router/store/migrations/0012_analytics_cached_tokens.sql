-- 0012: the prompt tokens each request took from the backend's cache (issue 33), read from the
-- answer's usage report like the other token counts (router/store/rows.py). NULL when the
-- answer reported none (Ollama's shape has no field for it; backends that do not say).

ALTER TABLE analytics_events ADD COLUMN cached_tokens INTEGER;
