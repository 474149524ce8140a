"""Analytics over a named range (`1h`, `24h`, `7d`, `30d`) from the rollup tables.

The WebUI's Analytics page asks for a range and gets, in one answer, totals, one row per model
and per lane, and a timeline with every bucket of the range (empty ones as zeros). SQLite reads
the rollups a trigger keeps (migration `analytics_rollup`), never the raw events, so the cost
follows the number of buckets, models and lanes, not the number of requests.

Counts, token sums and mean latencies are exact over the window: whole buckets, the last one
holding "now". Percentiles (totals, models, lanes; not per bucket) are nearest-rank over
log-spaced histograms, reported as the geometric middle of their bin (within 4.5 % of the
exact value), and cover the whole histogram periods the window touches: minutes for `1h`,
hours for `24h`, UTC days for `7d` and `30d` (`percentiles_from` / `percentiles_to` say so).
A per-minute histogram over a month would be as large as the raw events it replaces.

`plan()` and `fold()` are pure; `range_summary()` runs two queries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from router.store.summary import filter_clause

QUANTILES = {"p50": 50, "p95": 95}
METRICS = ("duration_ms", "queue_wait_ms")  # metric 0 and 1 in analytics_hist
RATIO = 2 ** (1 / 8)  # the migration's 1.0905077326652577
FIRST_LOWER = 0.01
BINS = 301


@dataclass(frozen=True, slots=True)
class Range:
    span: int  # seconds
    tier: int  # analytics_rollup tier the timeline reads
    bucket: int  # timeline bucket, a multiple of tier
    hist_tier: int  # analytics_hist tier the percentiles read


RANGES = {
    "1h": Range(3600, 60, 60, 60),
    "24h": Range(86400, 60, 900, 3600),
    "7d": Range(7 * 86400, 3600, 3600, 86400),
    "30d": Range(30 * 86400, 3600, 6 * 3600, 86400),
}


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    tier: int
    bucket: int
    from_ts: int
    to_ts: int
    hist_tier: int
    hist_from: int
    hist_to: int

    @property
    def buckets(self) -> int:
        return (self.to_ts - self.from_ts) // self.bucket


def plan(name: str, now: float) -> Window:
    """The window: whole buckets, the last one holding `now` (so it may still be filling)."""
    spec = RANGES[name]
    to_ts = (math.floor(now / spec.bucket) + 1) * spec.bucket
    from_ts = to_ts - spec.span
    unit = spec.hist_tier
    hist_from = from_ts // unit * unit
    hist_to = -(-to_ts // unit) * unit
    return Window(name, spec.tier, spec.bucket, from_ts, to_ts, unit, hist_from, hist_to)


def _lowers() -> list[float]:
    # The same recurrence, in the same IEEE doubles, as the migration's recursive CTE.
    lowers, value = [0.0], FIRST_LOWER
    for _ in range(1, BINS):
        lowers.append(value)
        value *= RATIO
    return lowers


LOWERS = _lowers()


def bin_value(index: int) -> float:
    """What a bin reports: the geometric middle of its bounds (0 for the [0, 0.01) bin)."""
    if index <= 0:
        return 0.0
    return round(LOWERS[min(index, BINS - 1)] * math.sqrt(RATIO), 3)


def percentile(hist: dict[int, int], pct: int) -> float | None:
    """Nearest rank, ceil(pct * n / 100), walked over the bins in order."""
    n = sum(hist.values())
    if n == 0:
        return None
    rank, seen = max(1, (n * pct + 99) // 100), 0
    for index in sorted(hist):
        seen += hist[index]
        if seen >= rank:
            return bin_value(index)
    return None  # unreachable: seen ends at n >= rank


def empty_cell() -> dict[str, Any]:
    return {
        "requests": 0,
        "errors": 0,
        "aborted": 0,
        "tokens": {"prompt": 0, "completion": 0, "total": 0},
        **{metric: {**dict.fromkeys(QUANTILES), "mean": None} for metric in METRICS},
        "_sums": [0.0, 0, 0.0, 0],
    }


def _add_counts(cell: dict[str, Any], row: Sequence[Any]) -> None:
    requests, errors, aborted, prompt, completion, total, *sums = row
    cell["requests"] += requests
    cell["errors"] += errors
    cell["aborted"] += aborted
    tokens = cell["tokens"]
    tokens["prompt"] += prompt
    tokens["completion"] += completion
    tokens["total"] += total
    cell["_sums"] = [a + b for a, b in zip(cell["_sums"], sums, strict=True)]


def _finish(cell: dict[str, Any], hists: list[dict[int, int]] | None) -> dict[str, Any]:
    """Means from the sums, percentiles from the histograms (when the cell has them)."""
    sums = cell.pop("_sums")
    for i, metric in enumerate(METRICS):
        total, n = sums[2 * i], sums[2 * i + 1]
        cell[metric]["mean"] = round(total / n, 3) if n else None
        if hists is not None:
            for name, pct in QUANTILES.items():
                cell[metric][name] = percentile(hists[i], pct)
    return cell


Hists = dict[Any, list[dict[int, int]]]  # key -> one histogram per metric


def _add_hist(hists: Hists, key: Any, metric: int, index: int, n: int) -> None:
    per_metric = hists.setdefault(key, [{} for _ in METRICS])
    per_metric[metric][index] = per_metric[metric].get(index, 0) + n


def fold(
    window: Window, counts: Iterable[Sequence[Any]], hists: Iterable[Sequence[Any]]
) -> dict[str, Any]:
    """The answer from the two queries' rows (pure)."""
    totals = empty_cell()
    models: dict[str, dict[str, Any]] = {}
    lanes: dict[str, dict[str, Any]] = {}
    buckets = [empty_cell() for _ in range(window.buckets)]
    for model, lane, k, *numbers in counts:
        for cell in (
            totals,
            models.setdefault(model, empty_cell()),
            lanes.setdefault(lane, empty_cell()),
            buckets[k],
        ):
            _add_counts(cell, numbers)
    by_model: Hists = {}
    by_lane: Hists = {}
    overall: Hists = {}
    for model, lane, metric, index, n in hists:
        for table, key in ((by_model, model), (by_lane, lane), (overall, None)):
            _add_hist(table, key, metric, index, n)
    return {
        "range": window.name,
        "from": window.from_ts,
        "to": window.to_ts,
        "bucket_seconds": window.bucket,
        "percentiles": "histogram",
        "percentiles_from": window.hist_from,
        "percentiles_to": window.hist_to,
        "totals": _finish(totals, overall.get(None, [{} for _ in METRICS])),
        "models": [
            {"model": m or None, **_finish(c, by_model.get(m, [{} for _ in METRICS]))}
            for m, c in sorted(models.items())
        ],
        "lanes": [
            {"lane": ln or None, **_finish(c, by_lane.get(ln, [{} for _ in METRICS]))}
            for ln, c in sorted(lanes.items())
        ],
        "buckets": [
            {"start": window.from_ts + k * window.bucket, **_finish(c, None)}
            for k, c in enumerate(buckets)
        ],
    }


# Minute counts and minute and hour histograms serve only `1h` and `24h`: two days of them are
# kept. Hourly counts (the 7d and 30d timelines) and daily histograms live as long as raw events.
SHORT_TIERS_KEEP = 2 * 86400


def expiry(now: float, raw_retention: float) -> list[tuple[str, tuple[Any, ...]]]:
    """The deletes that age the rollups out (run with the raw events' retention)."""
    keep = raw_retention + 86400  # the hour and day containing the cutoff stay whole
    short = now - SHORT_TIERS_KEEP
    return [
        ("DELETE FROM analytics_rollup WHERE tier = 60 AND start < ?", (short,)),
        ("DELETE FROM analytics_rollup WHERE tier = 3600 AND start < ?", (now - keep,)),
        ("DELETE FROM analytics_hist WHERE tier IN (60, 3600) AND start < ?", (short,)),
        ("DELETE FROM analytics_hist WHERE tier = 86400 AND start < ?", (now - keep,)),
    ]


def _where(
    tier: int, from_ts: int, to_ts: int, model: str | None, nodes: Sequence[str]
) -> tuple[str, list[Any]]:
    extra, filters = filter_clause(model, nodes)
    return "tier = ? AND start >= ? AND start < ?" + extra, [tier, from_ts, to_ts, *filters]


_COUNTS = """
SELECT model, lane, (start - ?) / ? AS k, SUM(requests), SUM(errors), SUM(aborted),
       SUM(prompt_tokens), SUM(completion_tokens), SUM(total_tokens),
       SUM(duration_sum), SUM(duration_n), SUM(queue_wait_sum), SUM(queue_wait_n)
FROM analytics_rollup WHERE {where} GROUP BY model, lane, k
"""
_HISTS = """
SELECT model, lane, metric, bin, SUM(n) FROM analytics_hist WHERE {where}
GROUP BY model, lane, metric, bin
"""


# The slowest requests of the window that have a trace (docs/observability.md): the WebUI links
# them to the trace viewer. Raw events: kept for `raw_retention`, like the window's percentiles.
TRACED_ROWS = 10
_TRACED = """
SELECT time, model, route, status, duration_ms, trace_id FROM analytics_events
WHERE trace_id IS NOT NULL AND time >= ? AND time < ?{filters}
ORDER BY duration_ms DESC LIMIT ?
"""
_TRACED_KEYS = ("time", "model", "route", "status", "duration_ms", "trace_id")


async def _rows(db: aiosqlite.Connection, sql: str, params: list[Any]) -> list[Any]:
    async with db.execute(sql, params) as cursor:
        return list(await cursor.fetchall())


async def range_summary(
    db: aiosqlite.Connection, window: Window, model: str | None, nodes: Sequence[str]
) -> dict[str, Any]:
    w = window
    where, params = _where(w.tier, w.from_ts, w.to_ts, model, nodes)
    counts = await _rows(db, _COUNTS.format(where=where), [w.from_ts, w.bucket, *params])
    where, params = _where(w.hist_tier, w.hist_from, w.hist_to, model, nodes)
    hists = await _rows(db, _HISTS.format(where=where), params)
    filters, values = filter_clause(model, nodes)
    traced = await _rows(
        db, _TRACED.format(filters=filters), [w.from_ts, w.to_ts, *values, TRACED_ROWS]
    )
    return {
        **fold(window, counts, hists),
        "traced": [dict(zip(_TRACED_KEYS, r, strict=True)) for r in traced],
    }
