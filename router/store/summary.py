"""The analytics summary, computed inside SQLite so a month of raw events never sits in memory.

Cells: the whole window, each model, each route template, each scoped key and each time
bucket. Each cell has requests, errors, aborted, token sums and nearest-rank p50/p95 of
duration and queue wait (window functions: SQLite sorts, spilling to temp storage for large
ranges).

Errors are statuses >= 400 on requests that were not aborted. A client that went away (499,
or `aborted` set by the proxy) is counted in `aborted` instead: it is not a failure of the
router or the backend, and counting it would make a flaky client look like a broken model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import aiosqlite

QUANTILES = {"p50": 50, "p95": 95}
METRICS = ("duration_ms", "queue_wait_ms")


def filter_clause(model: str | None, nodes: Sequence[str]) -> tuple[str, list[Any]]:
    """The model and node filters every analytics query takes: ` AND ...` and its parameters."""
    clause, params = "", list[Any]()
    if model is not None:
        clause += " AND model = ?"
        params.append(model)
    if nodes:
        clause += f" AND node_id IN ({', '.join('?' for _ in nodes)})"
        params.extend(nodes)
    return clause, params


def _where(model: str | None, nodes: Sequence[str]) -> tuple[str, list[Any]]:
    extra, params = filter_clause(model, nodes)
    return "time >= :from AND time < :to" + extra, params


def _bind(sql: str, from_ts: float, to_ts: float, bucket: int) -> str:
    # Named and positional placeholders cannot be mixed; the numbers are checked, not text.
    if not (math.isfinite(from_ts) and math.isfinite(to_ts) and bucket > 0):
        raise ValueError("the summary window must be finite and the bucket positive")
    return (
        sql.replace(":from", repr(float(from_ts)))
        .replace(":to", repr(float(to_ts)))
        .replace(":bucket", str(int(bucket)))
    )


_GROUPINGS = {
    "totals": "'all'",
    "models": "model",
    "routes": "route",
    "keys": "key_name",
    "buckets": "CAST((time - :from) / :bucket AS INTEGER)",
}

_COUNTS = """
SELECT {key} AS k, COUNT(*), COALESCE(SUM(aborted), 0),
       COALESCE(SUM(status >= 400 AND aborted = 0), 0),
       COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0),
       COALESCE(SUM(total_tokens), 0)
FROM analytics_events WHERE {where} GROUP BY k
"""

# ceil(p * n / 100) in integers (SQLite's ceil() needs an optional compile flag).
_RANKS = """
SELECT k, rn, n, v FROM (
  SELECT {key} AS k, {metric} AS v,
         ROW_NUMBER() OVER (PARTITION BY {key} ORDER BY {metric}) AS rn,
         COUNT(*) OVER (PARTITION BY {key}) AS n
  FROM analytics_events WHERE {where} AND {metric} IS NOT NULL
) WHERE rn IN (MAX(1, (n * 50 + 99) / 100), MAX(1, (n * 95 + 99) / 100))
"""


def _cell(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "requests": row[1],
        "errors": row[3],
        "aborted": row[2],
        "tokens": {"prompt": row[4], "completion": row[5], "total": row[6]},
        **{metric: dict.fromkeys(QUANTILES) for metric in METRICS},
    }


async def _grouping(
    db: aiosqlite.Connection, key: str, where: str, params: list[Any], bind: Any
) -> dict[Any, dict[str, Any]]:
    cells: dict[Any, dict[str, Any]] = {}
    async with db.execute(bind(_COUNTS.format(key=key, where=where)), params) as cursor:
        async for row in cursor:
            cells[row[0]] = _cell(row)
    for metric in METRICS:
        sql = bind(_RANKS.format(key=key, metric=metric, where=where))
        async with db.execute(sql, params) as cursor:
            async for k, rank, n, value in cursor:
                for name, pct in QUANTILES.items():
                    if rank == max(1, (n * pct + 99) // 100):
                        cells[k][metric][name] = value
    return cells


async def summarize(
    db: aiosqlite.Connection,
    from_ts: float,
    to_ts: float,
    model: str | None,
    nodes: Sequence[str],
    bucket_seconds: int,
) -> dict[str, Any]:
    where, params = _where(model, nodes)

    def bind(sql: str) -> str:
        return _bind(sql, from_ts, to_ts, bucket_seconds)

    groups = {
        name: await _grouping(db, key, where, params, bind) for name, key in _GROUPINGS.items()
    }
    empty = _cell((None, 0, 0, 0, 0, 0, 0))
    return {
        "from": from_ts,
        "to": to_ts,
        "bucket_seconds": bucket_seconds,
        "totals": groups["totals"].get("all", empty),
        "models": [{"model": k, **v} for k, v in sorted(groups["models"].items(), key=_order)],
        "routes": [{"route": k, **v} for k, v in sorted(groups["routes"].items(), key=_order)],
        # By scoped key (docs/configuration.md, "Scoped keys"); `key` null: no scoped key.
        "keys": [{"key": k, **v} for k, v in sorted(groups["keys"].items(), key=_order)],
        "buckets": [
            {"start": from_ts + k * bucket_seconds, **v}
            for k, v in sorted(groups["buckets"].items())
        ],
    }


def _order(item: tuple[Any, Any]) -> tuple[bool, str]:
    return (item[0] is None, str(item[0] or ""))
