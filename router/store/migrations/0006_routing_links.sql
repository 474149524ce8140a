-- 0006: lending links (docs/lending.md): one-way owner -> helper links between models on
-- different nodes, one set per lane (text, image).

CREATE TABLE routing_links (
    lane                 TEXT NOT NULL CHECK (lane IN ('text', 'image')),
    owner_node_id        TEXT NOT NULL,
    owner_model_id       TEXT NOT NULL,
    helper_node_id       TEXT NOT NULL,
    helper_model_id      TEXT NOT NULL,
    load_if_unloaded     INTEGER NOT NULL DEFAULT 1,
    restore_after_borrow INTEGER NOT NULL DEFAULT 0,
    updated_at           REAL NOT NULL,  -- unix seconds
    PRIMARY KEY (lane, owner_node_id, owner_model_id, helper_node_id, helper_model_id)
);
