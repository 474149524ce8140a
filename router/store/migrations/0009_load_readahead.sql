-- 0009: what the read-ahead of a model's files had done when its load began (docs/swaps.md,
-- "Overlapping the swap"): JSON {bytes, seconds, done, result, planned, total, capped}, or
-- NULL when no read-ahead ran for that load.

ALTER TABLE load_attempts ADD COLUMN readahead_json TEXT;
