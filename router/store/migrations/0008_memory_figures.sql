-- 0008: measured memory (docs/residency.md, "Measurements"): per configuration and the
-- fingerprint of what decides its memory, the bytes a load held on each device, how long it
-- took, and whether the last load failed for lack of memory (then the figure was raised).

CREATE TABLE memory_figures (
    config_id    TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,  -- router/memory/fingerprint.py
    devices      TEXT NOT NULL,  -- JSON object: device id ("host", "gpu0", ...) -> bytes
    load_seconds REAL,           -- spawn to ready; NULL for a failed load
    oom          INTEGER NOT NULL DEFAULT 0 CHECK (oom IN (0, 1)),
    method       TEXT NOT NULL CHECK (method IN ('report', 'process', 'raised')),
    measured_at  REAL NOT NULL,  -- unix seconds
    PRIMARY KEY (config_id, fingerprint)
);
