-- 0005: rollups of analytics_events kept by a trigger, so a range query over a month of
-- events reads thousands of rows instead of millions (router/store/ranges.py). Counts and sums per minute
-- and per hour (the timelines); latency histograms per minute, hour and day (percentiles).
-- Latency percentiles come from log-spaced histograms: bin 0 is [0, 0.01) ms, bin k >= 1 is
-- [0.01 * r^(k-1), 0.01 * r^k) ms with r = 2^(1/8), so a reported percentile is within
-- 4.5 % of the exact one. The bin bounds are data (this table), not a math function, so no
-- SQLite build option is needed.

CREATE TABLE analytics_bins (
    bin   INTEGER PRIMARY KEY,
    lower REAL    NOT NULL UNIQUE            -- ms; the bin is [lower, next bin's lower)
);
INSERT INTO analytics_bins (bin, lower) VALUES (0, 0.0);
WITH RECURSIVE b (bin, lower) AS (
    SELECT 1, 0.01
    UNION ALL
    SELECT bin + 1, lower * 1.0905077326652577 FROM b WHERE bin < 300  -- up to ~2.4e8 ms
)
INSERT INTO analytics_bins (bin, lower) SELECT bin, lower FROM b;

CREATE TABLE analytics_rollup (
    tier              INTEGER NOT NULL,      -- bucket width in seconds: 60 or 3600
    start             INTEGER NOT NULL,      -- unix seconds, a multiple of tier
    node_id           TEXT    NOT NULL,
    model             TEXT    NOT NULL,      -- '' when the event had none
    lane              TEXT    NOT NULL,      -- '' when the event had none
    requests          INTEGER NOT NULL,
    errors            INTEGER NOT NULL,      -- status >= 400 and not aborted (summary.py)
    aborted           INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    total_tokens      INTEGER NOT NULL,
    duration_sum      REAL    NOT NULL,      -- ms, over duration_n events that had one
    duration_n        INTEGER NOT NULL,
    queue_wait_sum    REAL    NOT NULL,
    queue_wait_n      INTEGER NOT NULL,
    PRIMARY KEY (tier, start, node_id, model, lane)
) WITHOUT ROWID;

CREATE TABLE analytics_hist (
    tier    INTEGER NOT NULL,                -- 60, 3600 or 86400
    start   INTEGER NOT NULL,
    node_id TEXT    NOT NULL,
    model   TEXT    NOT NULL,
    lane    TEXT    NOT NULL,
    metric  INTEGER NOT NULL,                -- 0: duration_ms, 1: queue_wait_ms
    bin     INTEGER NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (tier, start, node_id, model, lane, metric, bin)
) WITHOUT ROWID;

-- What is already stored (minute rows only for the last two days, as ranges.expiry keeps).
INSERT INTO analytics_rollup
    SELECT t.tier, CAST(e.time / t.tier AS INTEGER) * t.tier, e.node_id,
           COALESCE(e.model, ''), COALESCE(e.lane, ''), COUNT(*),
           SUM(e.status >= 400 AND e.aborted = 0), SUM(e.aborted),
           COALESCE(SUM(e.prompt_tokens), 0), COALESCE(SUM(e.completion_tokens), 0),
           COALESCE(SUM(e.total_tokens), 0), COALESCE(SUM(e.duration_ms), 0),
           COUNT(e.duration_ms), COALESCE(SUM(e.queue_wait_ms), 0), COUNT(e.queue_wait_ms)
    FROM analytics_events AS e, (SELECT 60 AS tier UNION ALL SELECT 3600) AS t
    WHERE t.tier = 3600 OR e.time >= CAST(strftime('%s', 'now') AS INTEGER) - 172800
    GROUP BY 1, 2, 3, 4, 5;
INSERT INTO analytics_hist
    SELECT tier, start, node_id, model, lane, metric,
           (SELECT bin FROM analytics_bins WHERE lower <= v ORDER BY lower DESC LIMIT 1) AS b,
           COUNT(*)
    FROM (SELECT t.tier, CAST(e.time / t.tier AS INTEGER) * t.tier AS start, e.node_id,
                 COALESCE(e.model, '') AS model, COALESCE(e.lane, '') AS lane, m.metric,
                 CASE m.metric WHEN 0 THEN e.duration_ms ELSE e.queue_wait_ms END AS v
          FROM analytics_events AS e, (SELECT 0 AS metric UNION ALL SELECT 1) AS m,
               (SELECT 60 AS tier UNION ALL SELECT 3600 UNION ALL SELECT 86400) AS t
          WHERE t.tier = 86400 OR e.time >= CAST(strftime('%s', 'now') AS INTEGER) - 172800)
    WHERE v IS NOT NULL AND v >= 0
    GROUP BY 1, 2, 3, 4, 5, 6, 7;

-- One row per (tier, metric): the bin is looked up once per metric, not once per tier.
CREATE TRIGGER analytics_events_rollup AFTER INSERT ON analytics_events
BEGIN
    INSERT INTO analytics_rollup
        SELECT t.tier, CAST(NEW.time / t.tier AS INTEGER) * t.tier, NEW.node_id,
               COALESCE(NEW.model, ''), COALESCE(NEW.lane, ''), 1,
               NEW.status >= 400 AND NEW.aborted = 0, NEW.aborted,
               COALESCE(NEW.prompt_tokens, 0), COALESCE(NEW.completion_tokens, 0),
               COALESCE(NEW.total_tokens, 0),
               COALESCE(NEW.duration_ms, 0), NEW.duration_ms IS NOT NULL,
               COALESCE(NEW.queue_wait_ms, 0), NEW.queue_wait_ms IS NOT NULL
        FROM (SELECT 60 AS tier UNION ALL SELECT 3600) AS t WHERE true
    ON CONFLICT DO UPDATE SET
        requests = requests + 1, errors = errors + excluded.errors,
        aborted = aborted + excluded.aborted,
        prompt_tokens = prompt_tokens + excluded.prompt_tokens,
        completion_tokens = completion_tokens + excluded.completion_tokens,
        total_tokens = total_tokens + excluded.total_tokens,
        duration_sum = duration_sum + excluded.duration_sum,
        duration_n = duration_n + excluded.duration_n,
        queue_wait_sum = queue_wait_sum + excluded.queue_wait_sum,
        queue_wait_n = queue_wait_n + excluded.queue_wait_n;
    INSERT INTO analytics_hist
        SELECT t.tier, CAST(NEW.time / t.tier AS INTEGER) * t.tier, NEW.node_id,
               COALESCE(NEW.model, ''), COALESCE(NEW.lane, ''), m.metric, m.bin, 1
        FROM (SELECT metric, (SELECT bin FROM analytics_bins WHERE lower <= v
                              ORDER BY lower DESC LIMIT 1) AS bin
              FROM (SELECT 0 AS metric, NEW.duration_ms AS v
                    UNION ALL SELECT 1, NEW.queue_wait_ms)
              WHERE v IS NOT NULL AND v >= 0) AS m,
             (SELECT 60 AS tier UNION ALL SELECT 3600 UNION ALL SELECT 86400) AS t
        WHERE true
    ON CONFLICT DO UPDATE SET n = n + 1;
END;
