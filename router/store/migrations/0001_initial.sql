-- 0001: analytics events, load captures (attempts + output chunks), load errors, model state.
-- No column anywhere can hold request or response content: the store API has no field for it.

CREATE TABLE analytics_events (
    id                INTEGER PRIMARY KEY,
    time              REAL    NOT NULL,  -- unix seconds when the request arrived
    route             TEXT    NOT NULL,  -- route template, e.g. /v1/chat/completions
    surface           TEXT,
    lane              TEXT,
    model             TEXT,              -- public model ID
    node_id           TEXT    NOT NULL,
    backend           TEXT,              -- backend family
    status            INTEGER NOT NULL,  -- what the client got (499: client went away)
    upstream_status   INTEGER,           -- last HTTP status the backend answered
    error_message     TEXT,              -- sanitized, at most 512 bytes
    queue_wait_ms     REAL,
    ttfb_ms           REAL,
    duration_ms       REAL,
    bytes_in          INTEGER,
    bytes_out         INTEGER,
    aborted           INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    total_tokens      INTEGER
);
CREATE INDEX analytics_events_time ON analytics_events (time);
CREATE INDEX analytics_events_model_time ON analytics_events (model, time);

CREATE TABLE load_attempts (
    id                TEXT    PRIMARY KEY,
    node_id           TEXT    NOT NULL,
    kind              TEXT    NOT NULL CHECK (kind IN ('load', 'reuse')),
    status            TEXT    NOT NULL,
    model             TEXT,
    backend           TEXT,
    lane              TEXT,
    kcpps_json        TEXT    NOT NULL DEFAULT '{}',  -- sanitize_kcpps() output
    asset_hashes_json TEXT    NOT NULL DEFAULT '{}',
    argv_json         TEXT    NOT NULL DEFAULT '[]',  -- argv_without_secrets() output
    exit_code         INTEGER,
    error             TEXT,
    started_at        REAL    NOT NULL,
    ended_at          REAL,
    duration_ms       REAL,
    output_bytes      INTEGER NOT NULL DEFAULT 0,
    output_truncated  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX load_attempts_started ON load_attempts (started_at, id);

CREATE TABLE load_output_chunks (
    attempt_id TEXT    NOT NULL REFERENCES load_attempts (id) ON DELETE CASCADE,
    sequence   INTEGER NOT NULL,
    stream     TEXT    NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    time       REAL    NOT NULL,
    data       BLOB    NOT NULL,
    truncated  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (attempt_id, sequence)
);

CREATE TABLE load_errors (
    id          INTEGER PRIMARY KEY,
    time        REAL    NOT NULL,
    node_id     TEXT    NOT NULL,
    model       TEXT,
    backend     TEXT,
    reason      TEXT    NOT NULL,
    exit_code   INTEGER,
    output_tail TEXT,
    attempt_id  TEXT
);
CREATE INDEX load_errors_time ON load_errors (time);

CREATE TABLE model_state (
    model_id   TEXT    PRIMARY KEY,
    disabled   INTEGER NOT NULL,
    updated_at REAL    NOT NULL
);
