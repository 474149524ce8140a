"""`Store`: the node's SQLite file (analytics, load captures, load errors, model state), and
its named parts: `benchmarks`, `costs`, `downloads`, `guardians`, `links`, `lending`, `memory`
(each a small class handed an `Access`: the writer, the reader and the settle-before-read).

All writes go through one `Writer` task; the recording calls (`record`, `capture_output`, ...)
are synchronous and only append to memory, so request handlers never wait on disk. Reads use a
second connection (WAL lets it read while the writer writes) after draining what is pending,
so an admin sees what was recorded a moment ago.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from router.config import AnalyticsSection
from router.errors import InternalError, StoreUnavailable, sanitize
from router.store import analytics as an
from router.store import captures as cap
from router.store import ranges
from router.store.access import Access
from router.store.benchmarks import BenchmarkRuns
from router.store.channel import EventChannel, log_skipped
from router.store.cost_samples import CostSamples
from router.store.db import connect, migrate, prepare_path, secure_files
from router.store.downloads import DownloadRows
from router.store.file_watch import FileWatch
from router.store.guardians import GuardianAssignments
from router.store.health import SETTING, cause, within
from router.store.lending import LendingRows
from router.store.links import RoutingLinks
from router.store.memory_figures import MemoryFigureRows
from router.store.rows import Raw, rows_from_raws
from router.store.summary import summarize
from router.store.writer import Op, Writer, WriterStats

log = logging.getLogger(__name__)

RETENTION_PERIOD = 3600.0
MAX_OUTPUT_TAIL = 16 * 1024
_DOWNLOAD_MARK = ".download-"


class Store(FileWatch):
    def __init__(
        self,
        path: Path,
        node_id: str,
        settings: AnalyticsSection,
        db: aiosqlite.Connection,
        reader: aiosqlite.Connection,
    ) -> None:
        self.path = path
        self.node_id = node_id
        self.settings = settings
        self._db = db
        self._reader = reader
        self._writer = Writer(db, settings.flush_interval, self._periodic)
        # The reader is looked up on each read: the store may move to a fresh file (FileWatch).
        access = Access(self._writer, lambda: self._reader, self._settle)
        self.benchmarks = BenchmarkRuns(access)
        self.costs = CostSamples(access, node_id)
        self.downloads = DownloadRows(access)
        self.guardians = GuardianAssignments(access)
        self.links = RoutingLinks(access)
        self.lending = LendingRows(access)
        self.memory = MemoryFigureRows(access)
        self._events: EventChannel | None = None  # the writer process, when analytics is on
        self._live: dict[str, cap.LiveCapture] = {}
        self._cap_bytes = int(settings.load_capture_max_output_mb * 1024 * 1024)
        self._last_retention = time.monotonic()
        self.schema_version = 0
        self._watch_init()

    @classmethod
    async def open(cls, path: Path, *, node_id: str, analytics: AnalyticsSection) -> Store:
        try:
            path = await asyncio.to_thread(_prepare, Path(path))
            db = await connect(path)
        except (OSError, sqlite3.Error) as exc:
            raise _cannot_open(path, exc) from None
        try:
            version = await migrate(db)
            reader = await connect(path, read_only=True)
        except (OSError, sqlite3.Error) as exc:
            await db.close()
            raise _cannot_open(path, exc) from None
        except InternalError as exc:
            await db.close()
            # A migration the disk refused (full, read-only) is that; a newer schema is not.
            if isinstance(exc.__cause__, OSError | sqlite3.Error):
                raise _cannot_open(path, exc.__cause__) from None
            raise
        except BaseException:
            await db.close()
            raise
        secure_files(path)
        store = cls(path, node_id, analytics, db, reader)
        store.schema_version = version
        await store._delete_expired(db)
        store._writer.start()
        if analytics.enabled and analytics.writer_process:
            await store._start_events()
        return store

    async def _start_events(self) -> None:
        channel = EventChannel(self.path, self.settings.flush_interval, self._writer.add_events)
        try:
            await channel.start()
        except OSError as exc:
            log.error("analytics writer process did not start (%s); writing in-process", exc)
            return
        self._events = channel

    async def close(self) -> None:
        try:
            if self._events is not None:
                await self._events.close()  # leftovers go to the in-process writer, closed next
            await self._writer.close()
        finally:
            await self._reader.close()
            await self._db.close()

    @property
    def pending(self) -> int:
        """Records and writes not yet committed, in this process or the writer process."""
        events = self._events.pending if self._events is not None else 0
        return events + self._writer.pending

    @property
    def stats(self) -> WriterStats:
        return self._writer.stats

    @property
    def capture_enabled(self) -> bool:
        return self.settings.load_capture_enabled

    # -- analytics ----------------------------------------------------------------------

    def record_raw(self, raw: Raw) -> None:
        """The router's own per-request record (Recorder.record): one append, nothing more."""
        if self._events is not None:
            self._events.add_raw(raw)
        elif self.settings.enabled:
            self._writer.add_events(rows_from_raws([raw], log_skipped))

    async def flush(self) -> int:
        """Write the buffer and fold the WAL back into the file; returns events written.
        StoreUnavailable (503, the cause named) past the store's deadline."""
        return await within(self.path, "write the events it holds", self._flush())

    async def _flush(self) -> int:
        committed = await self._events.sync() if self._events is not None else 0
        return committed + await self._writer.flush(checkpoint=True)

    async def _settle(self) -> None:
        """Before a read: everything recorded so far is in the database (or 503)."""
        await within(self.path, "write the events it holds before the read", self._settled())

    async def _settled(self) -> None:
        if self._events is not None:
            await self._events.sync()
        await self._writer.flush(checkpoint=False)

    async def summary(
        self,
        from_ts: float,
        to_ts: float,
        model: str | None = None,
        node: str | Sequence[str] | None = None,
        bucket_seconds: int = 3600,
    ) -> dict[str, Any]:
        await self._settle()
        nodes = [node] if isinstance(node, str) else list(node or ())
        result = await summarize(self._reader, from_ts, to_ts, model, nodes, bucket_seconds)
        return {"node_id": self.node_id, **result}

    async def range_summary(
        self,
        name: str,
        model: str | None = None,
        nodes: Sequence[str] = (),
        now: float | None = None,
    ) -> dict[str, Any]:
        """`1h`, `24h`, `7d` or `30d` up to now, from the rollups (router/store/ranges.py)."""
        await self._settle()
        window = ranges.plan(name, time.time() if now is None else now)
        result = await ranges.range_summary(self._reader, window, model, list(nodes))
        return {"node_id": self.node_id, **result}

    async def _periodic(self) -> None:
        await self.check_file()  # a deleted or replaced file (router/store/file_watch.py)
        await self._hourly()

    async def _hourly(self) -> None:
        if time.monotonic() - self._last_retention >= RETENTION_PERIOD:
            self._last_retention = time.monotonic()
            await self._delete_expired(self._db)

    async def _delete_expired(self, db: aiosqlite.Connection) -> int:
        cutoff = time.time() - self.settings.raw_retention
        cursor = await db.execute("DELETE FROM analytics_events WHERE time < ?", (cutoff,))
        for sql, params in ranges.expiry(time.time(), self.settings.raw_retention):
            await db.execute(sql, params)
        await self.lending.prune_in(db)
        return cursor.rowcount

    async def enforce_retention(self) -> int:
        """Delete raw events older than `raw_retention` now (also runs at open and hourly)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        cutoff = time.time() - self.settings.raw_retention
        self._writer.add_op(
            Op("DELETE FROM analytics_events WHERE time < ?", (cutoff,), future), urgent=True
        )
        for sql, params in ranges.expiry(time.time(), self.settings.raw_retention):
            self._writer.add_op(Op(sql, params))
        return await future

    # -- load captures ------------------------------------------------------------------

    def start_capture(
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
    ) -> str:
        """Open an attempt record; returns its id. With capture off, the id is inert.
        `readahead`: what the read-ahead of the model's files had done when the load began
        (docs/swaps.md); None when none ran for this load."""
        attempt_id = uuid.uuid4().hex
        if not self.capture_enabled:
            return attempt_id
        if kind not in ("load", "reuse"):
            raise ValueError(f"capture kind must be load or reuse, not {kind!r}")
        homes = (*map(str, home_dirs), str(Path.home()))
        snapshot = cap.sanitize_kcpps(kcpps or {}, homes)
        hashes = {cap.strip_path(str(k), homes): str(v) for k, v in (asset_hashes or {}).items()}
        row = (
            attempt_id,
            self.node_id,
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
        )
        self._writer.add_op(Op(_INSERT_ATTEMPT, row))
        self._live[attempt_id] = cap.LiveCapture(self._cap_bytes)
        return attempt_id

    def capture_output(self, attempt_id: str, stream: str, data: bytes) -> None:
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
        self._writer.add_op(Op(_INSERT_CHUNK, row))

    def finish_capture(
        self,
        attempt_id: str,
        status: str,
        exit_code: int | None = None,
        error: str | None = None,
        ended_at: float | None = None,
    ) -> None:
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
            attempt_id,
        )
        self._writer.add_op(Op(_FINISH_ATTEMPT, row), urgent=True)

    async def list_captures(self, filters: cap.CaptureFilter) -> dict[str, Any]:
        await self._settle()
        sql, params = filters.query()
        async with self._reader.execute(sql, params) as cursor:
            rows = list(await cursor.fetchall())
        page = [cap.attempt_dict(cap.SUMMARY_COLUMNS, row) for row in rows[: filters.limit]]
        more = len(rows) > filters.limit
        last = page[-1] if page else None
        cursor_out = cap.encode_cursor(last["started_at"], last["id"]) if more and last else None
        return {"captures": page, "next_cursor": cursor_out}

    async def load_durations(self, per_model: int = 10) -> dict[str, list[float]]:
        """Seconds of the last successful loads of each model, oldest first."""
        durations: dict[str, list[float]] = {}
        async with self._reader.execute(cap.LOAD_DURATIONS, (per_model,)) as cursor:
            async for model, ms in cursor:
                durations.setdefault(model, []).append(ms / 1000.0)
        return durations

    async def capture_detail(self, attempt_id: str) -> dict[str, Any] | None:
        await self._settle()
        sql = f"SELECT {', '.join(cap.DETAIL_COLUMNS)} FROM load_attempts WHERE id = ?"
        async with self._reader.execute(sql, (attempt_id,)) as cursor:
            row = await cursor.fetchone()
        return None if row is None else cap.attempt_dict(cap.DETAIL_COLUMNS, row)

    async def capture_output_page(
        self, attempt_id: str, after_sequence: int = 0, limit: int = 200
    ) -> dict[str, Any] | None:
        detail = await self.capture_detail(attempt_id)
        if detail is None:
            return None
        sql = (
            "SELECT sequence, stream, time, data, truncated FROM load_output_chunks"
            " WHERE attempt_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"
        )
        async with self._reader.execute(sql, (attempt_id, after_sequence, limit + 1)) as cur:
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

    # -- load errors --------------------------------------------------------------------

    def record_load_error(self, error: Mapping[str, Any]) -> None:
        tail = error.get("output_tail")
        if isinstance(tail, list | tuple):
            tail = "\n".join(map(str, tail))
        row = (
            an.as_float(error.get("time")) or time.time(),
            str(error.get("node_id") or self.node_id),
            an.as_text(error.get("model")),
            an.as_text(error.get("backend")),
            sanitize(str(error.get("reason") or "load failed")),
            an.as_int(error.get("exit_code")),
            None if tail is None else str(tail)[-MAX_OUTPUT_TAIL:],
            an.as_text(error.get("attempt_id")),
        )
        self._writer.add_op(Op(_INSERT_LOAD_ERROR, row), urgent=True)

    async def list_load_errors(self, limit: int = 100) -> list[dict[str, Any]]:
        await self._settle()
        sql = f"SELECT {', '.join(_LOAD_ERROR_COLUMNS)} FROM load_errors ORDER BY time DESC, id DESC LIMIT ?"
        async with self._reader.execute(sql, (limit,)) as cursor:
            rows = await cursor.fetchall()
        return [dict(zip(_LOAD_ERROR_COLUMNS, row, strict=True)) for row in rows]

    async def clear_load_errors(self) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._writer.add_op(Op("DELETE FROM load_errors", (), future), urgent=True)
        return await future

    # -- model state --------------------------------------------------------------------

    async def get_disabled(self) -> set[str]:
        await self._settle()
        sql = "SELECT model_id FROM model_state WHERE disabled = 1"
        async with self._reader.execute(sql) as cursor:
            return {row[0] for row in await cursor.fetchall()}

    async def set_disabled(self, model_id: str, disabled: bool) -> None:
        """Persist one model's state; returns once it is on disk."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        row = (model_id, int(disabled), time.time())
        self._writer.add_op(Op(_UPSERT_STATE, row, future), urgent=True)
        await future

    # -- file hashes (router/site/hashing.py) -------------------------------------------

    async def file_hashes(self) -> dict[str, tuple[int, int, str, str | None]]:
        """Resolved path -> (size, mtime_ns, sha256, metadata JSON) for every cached file."""
        await self._settle()
        sql = "SELECT path, size, mtime_ns, sha256, metadata FROM file_hashes"
        async with self._reader.execute(sql) as cursor:
            return {r[0]: (r[1], r[2], r[3], r[4]) for r in await cursor.fetchall()}

    def add_file_hash(self, row: tuple[str, int, int, str, str | None, float]) -> None:
        """Buffer one upsert, O(1); written with the next batch (a read settles it first)."""
        self._writer.add_op(Op(_UPSERT_HASH, row))

    # -- consistent copies --------------------------------------------------------------

    async def backup_to(self, dest: Path) -> int:
        """A single-point-in-time copy of the whole database at `dest` (0600); returns bytes."""
        await self._settle()
        return await within(
            self.path, "copy the database", asyncio.to_thread(_backup, self.path, Path(dest))
        )

    async def download_copy(self) -> Path:
        """A backup in a private temp file next to the database; the caller deletes it."""
        try:
            fd, name = tempfile.mkstemp(
                prefix=f".{self.path.name}{_DOWNLOAD_MARK}", suffix=".sqlite", dir=self.path.parent
            )
        except OSError as exc:
            raise StoreUnavailable(
                f"the analytics store cannot copy the database: {cause(self.path, exc)} ({SETTING})"
            ) from None
        os.close(fd)
        try:
            await self.backup_to(Path(name))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise
        return Path(name)


def _cannot_open(path: Path, exc: BaseException) -> StoreUnavailable:
    """The start-up failure, one line: the setting, the file and why (no traceback)."""
    return StoreUnavailable(f"cannot open the store ({SETTING} = {path}): {cause(Path(path), exc)}")


def _backup(source: Path, dest: Path) -> int:
    # A fresh connection: the backup holds one read snapshot for its single step while the
    # writer keeps committing to the WAL; the copy is then made self-contained (no WAL).
    fd = os.open(dest, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    os.chmod(dest, 0o600)
    src = sqlite3.connect(source)
    try:
        src.execute(f"PRAGMA busy_timeout = {5000}")
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst, pages=-1)
            dst.execute("PRAGMA journal_mode = DELETE")
        finally:
            dst.close()
    finally:
        src.close()
    return dest.stat().st_size


def _prepare(path: Path) -> Path:
    path = path.expanduser().absolute()
    prepare_path(path)
    for stale in path.parent.glob(f".{path.name}{_DOWNLOAD_MARK}*"):
        with contextlib.suppress(OSError):  # temp copies left behind by a crash mid-download
            stale.unlink()
    return path


_INSERT_ATTEMPT = (
    "INSERT INTO load_attempts (id, node_id, kind, status, model, backend, lane, kcpps_json,"
    " asset_hashes_json, argv_json, started_at, readahead_json)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CHUNK = (
    "INSERT INTO load_output_chunks (attempt_id, sequence, stream, time, data, truncated)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_FINISH_ATTEMPT = (
    "UPDATE load_attempts SET status = ?, exit_code = ?, error = ?, ended_at = ?,"
    " duration_ms = (? - started_at) * 1000.0, output_bytes = ?, output_truncated = ?"
    " WHERE id = ?"
)
_INSERT_LOAD_ERROR = (
    "INSERT INTO load_errors (time, node_id, model, backend, reason, exit_code, output_tail,"
    " attempt_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_LOAD_ERROR_COLUMNS = (
    "id",
    "time",
    "node_id",
    "model",
    "backend",
    "reason",
    "exit_code",
    "output_tail",
    "attempt_id",
)
_UPSERT_STATE = (
    "INSERT INTO model_state (model_id, disabled, updated_at) VALUES (?, ?, ?)"
    " ON CONFLICT (model_id) DO UPDATE SET disabled = excluded.disabled,"
    " updated_at = excluded.updated_at"
)
_UPSERT_HASH = (
    "INSERT INTO file_hashes (path, size, mtime_ns, sha256, metadata, hashed_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET size = excluded.size,"
    " mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256, metadata = excluded.metadata,"
    " hashed_at = excluded.hashed_at"
)
