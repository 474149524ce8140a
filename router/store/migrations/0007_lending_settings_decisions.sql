-- 0007: lending (docs/lending.md): the settings saved from the WebUI over the config file's,
-- and the decision log (why the master lent, held or refused; what a helper returned).

CREATE TABLE lending_settings (
    key        TEXT PRIMARY KEY,  -- a LendingSettings key, e.g. scheduling_backend_depth
    value      TEXT NOT NULL,     -- JSON: a number (durations in seconds) or a boolean
    updated_at REAL NOT NULL      -- unix seconds
);

-- AUTOINCREMENT: an id is never reused after pruning, so `before=<id>` paging stays stable.
CREATE TABLE offload_decisions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              REAL NOT NULL,  -- unix seconds
    kind            TEXT NOT NULL CHECK (kind IN ('plan', 'dispatch', 'helper')),
    "trigger"       TEXT NOT NULL DEFAULT '',
    outcome         TEXT NOT NULL,
    reasons         TEXT NOT NULL DEFAULT '[]',  -- JSON list of reason names
    lane            TEXT NOT NULL,
    owner_node_id   TEXT NOT NULL DEFAULT '',
    owner_model_id  TEXT NOT NULL DEFAULT '',
    helper_node_id  TEXT NOT NULL DEFAULT '',
    helper_model_id TEXT NOT NULL DEFAULT '',
    router_version  TEXT NOT NULL,
    detail          TEXT NOT NULL DEFAULT '{}'   -- JSON object
);
CREATE INDEX offload_decisions_at ON offload_decisions (at);
