-- 0010: scoped keys (docs/configuration.md, "Scoped keys"; docs/store.md) and the key each
-- analytics event was sent with. A key's secret is never stored: only its SHA-256 digest.
-- A revoked key keeps its row (and name) so the analytics that name it still mean something.

CREATE TABLE scoped_keys (
    name           TEXT    PRIMARY KEY,
    digest         BLOB    NOT NULL UNIQUE,           -- SHA-256 of the secret
    models_json    TEXT    NOT NULL DEFAULT '[]',     -- IDs or glob patterns; [] = every model
    priority       TEXT    NOT NULL DEFAULT 'interactive'
                           CHECK (priority IN ('interactive', 'batch')),
    max_concurrent INTEGER,                           -- NULL: no cap
    daily_tokens   INTEGER,                           -- NULL: no quota
    created        REAL    NOT NULL,
    revoked        REAL                               -- NULL while the key works
);

ALTER TABLE analytics_events ADD COLUMN key_name TEXT;  -- NULL: no scoped key
CREATE INDEX analytics_events_key_time ON analytics_events (key_name, time);
