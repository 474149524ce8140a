-- 0003: Hugging Face download jobs and the library of files they placed. No column holds a
-- token: a job resumed after a restart uses the token the settings give then.

CREATE TABLE download_jobs (
    id          TEXT    PRIMARY KEY,
    node_id     TEXT    NOT NULL,
    repository  TEXT    NOT NULL,
    revision    TEXT,
    commit_sha  TEXT    NOT NULL,
    state       TEXT    NOT NULL,  -- queued running paused completed failed cancelled interrupted
    files_json  TEXT    NOT NULL,  -- [{path, size, sha256, blob_id, done}]
    bytes_total INTEGER NOT NULL,
    bytes_done  INTEGER NOT NULL DEFAULT 0,
    error       TEXT,
    created_at  REAL    NOT NULL,
    updated_at  REAL    NOT NULL,
    finished_at REAL
);
CREATE INDEX download_jobs_created ON download_jobs (created_at);

CREATE TABLE download_library (
    path        TEXT    PRIMARY KEY,  -- relative to downloads.dir: owner/name/repo_path
    repository  TEXT    NOT NULL,
    commit_sha  TEXT    NOT NULL,
    repo_path   TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    sha256      TEXT    NOT NULL,
    verified_by TEXT    NOT NULL,     -- sha256 (LFS), git-sha1 (blob id) or size
    job_id      TEXT,
    downloaded_at REAL  NOT NULL
);

-- Hugging Face origins learned for a content hash (model-assets/bind): where a file with this
-- SHA-256 can be fetched again, pinned to a commit.
CREATE TABLE asset_origins (
    sha256      TEXT    PRIMARY KEY,
    repository  TEXT    NOT NULL,
    commit_sha  TEXT    NOT NULL,
    repo_path   TEXT    NOT NULL,
    bound_at    REAL    NOT NULL
);
