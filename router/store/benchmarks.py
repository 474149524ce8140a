"""Benchmark runs in the store (`benchmark_runs`, migration 0002): a mixin of `Store`.

Rows arrive already shaped (router/benchmarks builds them); this only writes them through the
store's one writer and reads them back as dicts of columns, newest first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiosqlite

from router.store.writer import Op, Writer

COLUMNS = (
    "id", "section", "node_id", "model_id", "type", "status", "started_at", "finished_at",
    "duration_ms", "metrics_json", "error",
)  # fmt: skip
_UPSERT = (
    f"INSERT INTO benchmark_runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
    " ON CONFLICT (id, section) DO UPDATE SET status = excluded.status,"
    " finished_at = excluded.finished_at, duration_ms = excluded.duration_ms,"
    " metrics_json = excluded.metrics_json, error = excluded.error"
)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM benchmark_runs"
RUN_SECTION = "run"


class BenchmarkRuns:
    """What `Store` provides to this mixin: its writer, its reader and `_settle()`."""

    _writer: Writer
    _reader: aiosqlite.Connection

    async def _settle(self) -> None:
        raise NotImplementedError

    async def save_benchmark(self, row: Sequence[Any]) -> None:
        """Insert or update one row (COLUMNS order); returns once it is on disk."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._writer.add_op(Op(_UPSERT, tuple(row), future), urgent=True)
        await future

    async def benchmark_rows(self, model_id: str, runs: int) -> list[dict[str, Any]]:
        """Every row of the model's newest `runs` runs, newest run first."""
        await self._settle()
        sql = (
            f"{_SELECT} WHERE id IN (SELECT id FROM benchmark_runs WHERE model_id = ?"
            " AND section = ? ORDER BY started_at DESC LIMIT ?)"
            " ORDER BY started_at DESC, id, section"
        )
        return await self._rows(sql, (model_id, RUN_SECTION, runs))

    async def latest_benchmarks(self) -> dict[str, dict[str, Any]]:
        """The newest run row of each model (for `/router/v1/models`)."""
        await self._settle()
        sql = (
            f"{_SELECT} AS b WHERE section = ? AND started_at = (SELECT MAX(started_at)"
            " FROM benchmark_runs WHERE model_id = b.model_id AND section = ?)"
        )
        return {row["model_id"]: row for row in await self._rows(sql, (RUN_SECTION,) * 2)}

    async def fail_unfinished_benchmarks(self, reason: str, finished_at: float) -> int:
        """Rows a stopped router left `running` become `failed` (at start and at close)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        sql = (
            "UPDATE benchmark_runs SET status = 'failed', error = ?, finished_at = ?,"
            " duration_ms = (? - started_at) * 1000.0 WHERE status = 'running'"
        )
        self._writer.add_op(Op(sql, (reason, finished_at, finished_at), future), urgent=True)
        return await future

    async def _rows(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        async with self._reader.execute(sql, params) as cursor:
            rows = await cursor.fetchall()
        return [dict(zip(COLUMNS, row, strict=True)) for row in rows]
