"""`Store`: the node's SQLite file (analytics, load captures, load errors, model state, file
hashes), and its named parts: `benchmarks`, `costs`, `downloads`, `guardians`, `links`,
`lending`, `memory`, `scoped_keys` (each a small class handed an `Access`: the writer, the reader and the
settle-before-read), and `load_attempts`, `load_errors`, `model_states`, `file_hashes` the
same way: callers use the part (`store.load_errors.record(...)`), never a forwarding method.
This module composes them: open, the writer, settle, retention, copies, and the analytics.

All writes go through one `Writer` task; the recording calls (`record_raw`, `load_attempts.output`, ...)
are synchronous and only append to memory, so request handlers never wait on disk. Reads use a
second connection (WAL lets it read while the writer writes) after draining what is pending,
so an admin sees what was recorded a moment ago.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from router.config import AnalyticsSection
from router.errors import InternalError, StoreUnavailable
from router.store import copies, ranges
from router.store.access import Access
from router.store.benchmarks import BenchmarkRuns
from router.store.channel import EventChannel, log_skipped
from router.store.cost_samples import CostSamples
from router.store.db import connect, migrate, secure_files
from router.store.downloads import DownloadRows
from router.store.file_hashes import FileHashes
from router.store.file_watch import FileWatch
from router.store.guardians import GuardianAssignments
from router.store.health import SETTING, cause, within
from router.store.lending import LendingRows
from router.store.links import RoutingLinks
from router.store.load_attempts import LoadAttempts
from router.store.load_errors import LoadErrors
from router.store.memory_figures import MemoryFigureRows
from router.store.model_state import ModelStates
from router.store.rows import Raw, rows_from_raws
from router.store.scoped_keys import ScopedKeyRows
from router.store.summary import summarize
from router.store.writer import Op, Writer, WriterStats

log = logging.getLogger(__name__)

RETENTION_PERIOD = 3600.0


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
        self.load_attempts = LoadAttempts(access, node_id, settings)
        self.load_errors = LoadErrors(access, node_id)
        self.model_states = ModelStates(access)
        self.file_hashes = FileHashes(access)
        self.scoped_keys = ScopedKeyRows(access)
        self._events: EventChannel | None = None  # the writer process, when analytics is on
        self._last_retention = time.monotonic()
        self.schema_version = 0
        self._watch_init()

    @classmethod
    async def open(cls, path: Path, *, node_id: str, analytics: AnalyticsSection) -> Store:
        try:
            path = await asyncio.to_thread(copies.prepare, Path(path))
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
        copy: Path | None = None
        try:
            if self._events is not None:
                await self._events.close()  # leftovers go to the in-process writer, closed next
            await self._writer.close()
            copy = await self.copy_if_deleted()
        finally:
            await self._reader.close()
            await self._db.close()
        if copy is not None:  # only now: closing the old file deleted its -wal and -shm
            await asyncio.to_thread(os.replace, copy, self.path)

    @property
    def pending(self) -> int:
        """Records and writes not yet committed, in this process or the writer process."""
        events = self._events.pending if self._events is not None else 0
        return events + self._writer.pending

    @property
    def stats(self) -> WriterStats:
        return self._writer.stats

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

    # -- consistent copies (router/store/copies.py) -------------------------------------

    async def backup_to(self, dest: Path) -> int:
        """A single-point-in-time copy of the whole database at `dest` (0600); returns bytes."""
        await self._settle()
        return await within(
            self.path, "copy the database", asyncio.to_thread(copies.backup, self.path, Path(dest))
        )

    async def download_copy(self) -> Path:
        """A backup in a private temp file next to the database; the caller deletes it."""
        name = copies.temp_copy_path(self.path)
        try:
            await self.backup_to(name)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise
        return name


def _cannot_open(path: Path, exc: BaseException) -> StoreUnavailable:
    """The start-up failure, one line: the setting, the file and why (no traceback)."""
    return StoreUnavailable(f"cannot open the store ({SETTING} = {path}): {cause(Path(path), exc)}")
