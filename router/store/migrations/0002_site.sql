-- 0002: what the site APIs keep: file hashes (cached by path, size and mtime so a second
-- inventory reads no file again) and benchmark runs (one row per run and section).

CREATE TABLE file_hashes (
    path        TEXT    PRIMARY KEY,      -- absolute, resolved path under models.file_roots
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    sha256      TEXT    NOT NULL,         -- 64 lowercase hex
    metadata    TEXT,                     -- JSON: a GGUF's header keys, read with the hash
    hashed_at   REAL    NOT NULL          -- unix seconds
);
CREATE INDEX file_hashes_sha256 ON file_hashes (sha256);

CREATE TABLE benchmark_runs (
    id           TEXT    NOT NULL,        -- run id, shared by every section of one run
    section      TEXT    NOT NULL,        -- runtime, llm, embed, image, voice, music, or 'run' (the whole run)
    node_id      TEXT    NOT NULL,
    model_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL CHECK (type IN ('general', 'section')),
    status       TEXT    NOT NULL,        -- success, failed, skipped, partial, running
    started_at   REAL    NOT NULL,
    finished_at  REAL,
    duration_ms  REAL,
    metrics_json TEXT    NOT NULL DEFAULT '[]',
    error        TEXT,
    PRIMARY KEY (id, section)
);
CREATE INDEX benchmark_runs_model_time ON benchmark_runs (model_id, started_at);
