"""Benchmark runs in the store (`benchmark_runs`, migration 0002): `Store.benchmarks`.

Rows arrive already shaped (router/benchmarks builds them); this only writes them through the
store's one writer and reads them back as dicts of columns, newest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from router.store.access import Access

COLUMNS = (
    "id",
    "section",
    "node_id",
    "model_id",
    "type",
    "status",
    "started_at",
    "finished_at",
    "duration_ms",
    "metrics_json",
    "error",
)
_UPSERT = (
    f"INSERT INTO benchmark_runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
    " ON CONFLICT (id, section) DO UPDATE SET status = excluded.status,"
    " finished_at = excluded.finished_at, duration_ms = excluded.duration_ms,"
    " metrics_json = excluded.metrics_json, error = excluded.error"
)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM benchmark_runs"
RUN_SECTION = "run"


class BenchmarkRuns:
    def __init__(self, access: Access) -> None:
        self._db = access

    async def save(self, row: Sequence[Any]) -> None:
        """Insert or update one row (COLUMNS order); returns once it is on disk."""
        await self._db.write(_UPSERT, row)

    async def runs(self, model_id: str, runs: int) -> list[dict[str, Any]]:
        """Every row of the model's newest `runs` runs, newest run first."""
        sql = (
            f"{_SELECT} WHERE id IN (SELECT id FROM benchmark_runs WHERE model_id = ?"
            " AND section = ? ORDER BY started_at DESC LIMIT ?)"
            " ORDER BY started_at DESC, id, section"
        )
        return await self._db.dicts(sql, (model_id, RUN_SECTION, runs), COLUMNS)

    async def latest(self) -> dict[str, dict[str, Any]]:
        """The newest run row of each model (for `/router/v1/models`)."""
        sql = (
            f"{_SELECT} AS b WHERE section = ? AND started_at = (SELECT MAX(started_at)"
            " FROM benchmark_runs WHERE model_id = b.model_id AND section = ?)"
        )
        rows = await self._db.dicts(sql, (RUN_SECTION,) * 2, COLUMNS)
        return {row["model_id"]: row for row in rows}

    async def fail_unfinished(self, reason: str, finished_at: float) -> int:
        """Rows a stopped router left `running` become `failed` (at start and at close)."""
        sql = (
            "UPDATE benchmark_runs SET status = 'failed', error = ?, finished_at = ?,"
            " duration_ms = (? - started_at) * 1000.0 WHERE status = 'running'"
        )
        return await self._db.write(sql, (reason, finished_at, finished_at))
