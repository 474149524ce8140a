-- 0013: what a load of a model spread over lending nodes sent to each (docs/cluster.md,
-- "Pooled memory"): JSON {bytes_sent, nodes: [{node_id, endpoint, bytes_sent}]}, read from the
-- kernel's TCP counters once llama-server was ready; NULL for a load on one box.

ALTER TABLE load_attempts ADD COLUMN pooled_json TEXT;
