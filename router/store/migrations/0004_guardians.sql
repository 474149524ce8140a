-- 0004: guardian models (docs/guardians.md): which multimodal model answers image requests
-- sent to a text-only model, at cluster, node or model scope; and, on each analytics event,
-- the guardian that answered for the requested model.

ALTER TABLE analytics_events ADD COLUMN answered_by TEXT;  -- the guardian's model ID, or NULL

CREATE TABLE guardian_models (
    scope             TEXT NOT NULL CHECK (scope IN ('cluster', 'node', 'model')),
    node_id           TEXT NOT NULL DEFAULT '',   -- '' at cluster scope
    model_id          TEXT NOT NULL DEFAULT '',   -- '' at cluster and node scope
    guardian_node_id  TEXT NOT NULL,
    guardian_model_id TEXT NOT NULL,
    updated_at        REAL NOT NULL,              -- unix seconds
    PRIMARY KEY (scope, node_id, model_id)
);
