"""Load captures in the store (`load_attempts`, `load_output_chunks`; docs/store.md): each load
attempt's sanitised launch (router/store/captures.py) and the backend's output up to the cap.
`Store.load_attempts`: `start`, `output` and `finish` as a load runs, then the reads.

Recording is synchronous and only appends to the writer's buffer: a backend's output never
waits on disk.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from router.config import AnalyticsSection
from router.errors import sanitize
from router.store import captures as cap
from router.store.access import Access
from router.store.writer import Op

_INSERT_ATTEMPT = (
    "INSERT INTO load_attempts (id, node_id, kind, status, model, backend, lane, kcpps_json,"
    " asset_hashes_json, argv_json, started_at, readahead_json, trace_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CHUNK = (
    "INSERT INTO load_output_chunks (attempt_id, sequence, stream, time, data, truncated)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_FINISH_ATTEMPT = (
    "UPDATE load_attempts SET status = ?, exit_code = ?, error = ?, ended_at = ?,"
    " duration_ms = (? - started_at) * 1000.0, output_bytes = ?, output_truncated = ?,"
    " pooled_json = ? WHERE id = ?"
)
_OUTPUT_PAGE = (
    "SELECT sequence, stream, time, data, truncated FROM load_output_chunks"
    " WHERE attempt_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"
)


class LoadAttempts:
    def __init__(self, access: Access, node_id: str, settings: AnalyticsSection) -> None:
        self._db = access
        self._node_id = node_id
        self._settings = settings
        self._live: dict[str, cap.LiveCapture] = {}
        self._cap_bytes = int(settings.load_capture_max_output_mb * 1024 * 1024)

    @property
    def enabled(self) -> bool:
        return self._settings.load_capture_enabled

    def start(
        self,
        *,
        model: str | None,
        backend: str | None,
        kind: str = "load",
        lane: str | None = None,
        kcpps: Mapping[str, Any] | None = None,
        asset_hashes: Mapping[str, str] | None = None,
        argv: Iterable[str] = (),
        home_dirs: Iterable[str] = (),
        started_at: float | None = None,
        readahead: Mapping[str, Any] | None = None,
        trace_id: str | None = None,
    ) -> str:
        """Open an attempt record; returns its id. With capture off, the id is inert.
        `readahead`: what the read-ahead of the model's files had done when the load began
        (docs/swaps.md); None when none ran for this load. `trace_id`: the load's trace, when
        traces are on (docs/observability.md)."""
        attempt_id = uuid.uuid4().hex
        if not self.enabled:
            return attempt_id
        if kind not in ("load", "reuse"):
            raise ValueError(f"capture kind must be load or reuse, not {kind!r}")
        homes = (*map(str, home_dirs), str(Path.home()))
        snapshot = cap.sanitize_kcpps(kcpps or {}, homes)
        hashes = {cap.strip_path(str(k), homes): str(v) for k, v in (asset_hashes or {}).items()}
        row = (
            attempt_id,
            self._node_id,
            kind,
            "running",
            model,
            backend,
            lane,
            json.dumps(snapshot, default=str),
            json.dumps(hashes),
            json.dumps(cap.argv_without_secrets(argv, homes)),
            started_at or time.time(),
            json.dumps(dict(readahead)) if readahead is not None else None,
            trace_id,
        )
        self._db.writer.add_op(Op(_INSERT_ATTEMPT, row))
        self._live[attempt_id] = cap.LiveCapture(self._cap_bytes)
        return attempt_id

    def output(self, attempt_id: str, stream: str, data: bytes) -> None:
        """Buffer one chunk of a backend's output; cheap no-op once the cap is reached."""
        live = self._live.get(attempt_id)
        if live is None or not data:
            return
        if stream not in cap.STREAMS:
            raise ValueError(f"stream must be stdout or stderr, not {stream!r}")
        admitted = live.admit(bytes(data))
        if admitted is None:
            return
        chunk, truncated = admitted
        row = (attempt_id, live.sequence, stream, time.time(), chunk, int(truncated))
        self._db.writer.add_op(Op(_INSERT_CHUNK, row))

    def finish(
        self,
        attempt_id: str,
        status: str,
        exit_code: int | None = None,
        error: str | None = None,
        ended_at: float | None = None,
        pooled: Mapping[str, Any] | None = None,
    ) -> None:
        """`pooled`: the bytes the load sent to each lending node (docs/cluster.md), when it
        spans nodes."""
        live = self._live.pop(attempt_id, None)
        if live is None:
            return
        ended = ended_at or time.time()
        row = (
            status,
            exit_code,
            sanitize(error) if error else None,
            ended,
            ended,
            live.stored,
            int(live.truncated),
            json.dumps(dict(pooled)) if pooled is not None else None,
            attempt_id,
        )
        self._db.writer.add_op(Op(_FINISH_ATTEMPT, row), urgent=True)

    async def page(self, filters: cap.CaptureFilter) -> dict[str, Any]:
        await self._db.settle()
        sql, params = filters.query()
        async with self._db.reader.execute(sql, params) as cursor:
            rows = list(await cursor.fetchall())
        page = [cap.attempt_dict(cap.SUMMARY_COLUMNS, row) for row in rows[: filters.limit]]
        more = len(rows) > filters.limit
        last = page[-1] if page else None
        cursor_out = cap.encode_cursor(last["started_at"], last["id"]) if more and last else None
        return {"captures": page, "next_cursor": cursor_out}

    async def durations(self, per_model: int = 10) -> dict[str, list[float]]:
        """Seconds of the last successful loads of each model, oldest first."""
        durations: dict[str, list[float]] = {}
        async with self._db.reader.execute(cap.LOAD_DURATIONS, (per_model,)) as cursor:
            async for model, ms in cursor:
                durations.setdefault(model, []).append(ms / 1000.0)
        return durations

    async def detail(self, attempt_id: str) -> dict[str, Any] | None:
        await self._db.settle()
        sql = f"SELECT {', '.join(cap.DETAIL_COLUMNS)} FROM load_attempts WHERE id = ?"
        async with self._db.reader.execute(sql, (attempt_id,)) as cursor:
            row = await cursor.fetchone()
        return None if row is None else cap.attempt_dict(cap.DETAIL_COLUMNS, row)

    async def output_page(
        self, attempt_id: str, after_sequence: int = 0, limit: int = 200
    ) -> dict[str, Any] | None:
        detail = await self.detail(attempt_id)
        if detail is None:
            return None
        params = (attempt_id, after_sequence, limit + 1)
        async with self._db.reader.execute(_OUTPUT_PAGE, params) as cur:
            rows = list(await cur.fetchall())
        chunks = [cap.chunk_dict(row) for row in rows[:limit]]
        return {
            "attempt_id": attempt_id,
            "chunks": chunks,
            "next_after_sequence": chunks[-1]["sequence"] if chunks else after_sequence,
            "more": len(rows) > limit,
            "truncated": detail["output_truncated"],
            "finished": detail["ended_at"] is not None,
        }
