"""The single writer: one task, one connection, fed by in-memory buffers that never block.

Callers append rows with synchronous O(1) calls; the task writes everything pending in one
transaction every `flush_interval`, when woken (a flush request, an urgent op, the soft bound)
and on close. At the bound (`MAX_PENDING`) nothing is dropped: the writer is woken at once and
`overflows` counts the event, so memory grows past the bound only while the disk is slower
than the producers. A batch that fails for a transient reason (locked, I/O, disk full) is put
back in front and retried; a batch with a bad row is replayed one op at a time so one bad row
cannot hold the others hostage (the bad one is logged and counted in `rejected`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from router.store.rows import INSERT_EVENT, INSERT_EVENTS_JSON, Row

log = logging.getLogger(__name__)

MAX_PENDING = 50_000
EARLY_WRITE_ROWS = 2_000
BATCH_ROWS = 256
RETRY_DELAY = 1.0
# What SQLite refuses for one row: its own errors, and the ones the sqlite3 module raises while
# binding a value it cannot store (an int past 64 bits is OverflowError). Replayed row by row
# like a constraint failure; an OperationalError (locked, I/O, full) is transient and retried.
_REFUSALS = (sqlite3.Error, OverflowError, TypeError, ValueError)


@dataclass
class Op:
    """One write; ops with a future report their rowcount to an awaiting caller."""

    sql: str
    params: Sequence[Any]
    future: asyncio.Future[int] | None = None


@dataclass
class _FlushRequest:
    future: asyncio.Future[int]
    checkpoint: bool


@dataclass
class WriterStats:
    written: int = 0
    overflows: int = 0
    rejected: int = 0
    replayed: int = 0  # batches refused whole and replayed one row at a time
    write_errors: int = 0
    late: int = 0


class Writer:
    def __init__(
        self,
        db: aiosqlite.Connection,
        interval: float,
        periodic: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._db = db
        self._interval = interval
        self._periodic = periodic
        self._events: list[Row] = []
        self._ops: list[Op] = []
        self._requests: list[_FlushRequest] = []
        self._wake = asyncio.Event()
        self._closing = False
        self.stats = WriterStats()
        self._task: asyncio.Task[None] | None = None

    def swap(self, db: aiosqlite.Connection) -> None:
        """Write to `db` from now on (the store reopened its file); between writes only."""
        self._db = db

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="store-writer")

    @property
    def pending(self) -> int:
        return len(self._events) + len(self._ops)

    def add_events(self, rows: list[Row]) -> None:
        self._events += rows
        if len(self._events) >= EARLY_WRITE_ROWS:
            self._wake.set()  # under load, write steadily rather than in one burst per interval
        self._check_bound()

    def add_op(self, op: Op, *, urgent: bool = False) -> None:
        self._ops.append(op)
        if urgent:
            self._wake.set()
        self._check_bound()

    def _check_bound(self) -> None:
        if self._closing and self._task is not None and self._task.done():
            self.stats.late += 1
            if self.stats.late == 1 or self.stats.late % 1000 == 0:
                log.warning("store closed: %d late write(s) not persisted", self.stats.late)
        elif self.pending >= MAX_PENDING:
            self.stats.overflows += 1
            self._wake.set()

    async def flush(self, *, checkpoint: bool) -> int:
        """Wait until everything pending now is written; returns analytics rows written."""
        if self._task is None or self._task.done():
            return await self._write_pending(checkpoint)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._requests.append(_FlushRequest(future, checkpoint))
        self._wake.set()
        return await future

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        try:
            await self._write_pending(True)  # whatever arrived while the task was finishing
        finally:
            # Nothing will retry after close: callers awaiting an op must not hang.
            for op in self._ops:
                if op.future is not None and not op.future.done():
                    op.future.set_exception(sqlite3.OperationalError("store closed"))

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)
            self._wake.clear()
            closing = self._closing
            requests, self._requests = self._requests, []
            checkpoint = closing or any(r.checkpoint for r in requests)
            try:
                written = await self._write_pending(checkpoint)
                if self._periodic is not None and not closing:
                    await self._periodic()
            except Exception as exc:  # the writer must outlive any one bad moment
                self.stats.write_errors += 1
                _log_failure(exc, self.stats.write_errors)
                for request in requests:
                    if not request.future.done():
                        request.future.set_exception(exc)
                if closing:
                    return
                await asyncio.sleep(RETRY_DELAY)
                continue
            for request in requests:
                if not request.future.done():
                    request.future.set_result(written)
            if closing:
                return

    async def _write_pending(self, checkpoint: bool) -> int:
        events, self._events = self._events, []
        ops, self._ops = self._ops, []
        if events or ops:
            try:
                await self._transaction(events, ops)
            except sqlite3.OperationalError:
                # Transient (locked, I/O, full): put everything back, in order, for the retry.
                self._events[:0] = events
                self._ops[:0] = ops
                raise
            except _REFUSALS:
                log.warning("store writer: a batch was refused; replaying it row by row")
                self.stats.replayed += 1
                await self._one_by_one(events, ops)
        if checkpoint:
            await self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.stats.written += len(events)
        return len(events)

    async def _transaction(self, events: list[Row], ops: list[Op]) -> None:
        db = self._db
        await db.execute("BEGIN IMMEDIATE")
        results: list[tuple[asyncio.Future[int], int]] = []
        try:
            # Encoded here in slices so no one slice holds the event loop for long.
            for start in range(0, len(events), BATCH_ROWS):
                batch = _encode(events[start : start + BATCH_ROWS])
                await db.execute(INSERT_EVENTS_JSON, (batch,))
            for group in _groups(ops):
                if len(group) == 1:
                    cursor = await db.execute(group[0].sql, group[0].params)
                    if group[0].future is not None:
                        results.append((group[0].future, cursor.rowcount))
                else:
                    await db.executemany(group[0].sql, [op.params for op in group])
            await db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await db.execute("ROLLBACK")
            raise
        for future, rowcount in results:
            if not future.done():
                future.set_result(rowcount)

    async def _one_by_one(self, events: list[Row], ops: list[Op]) -> None:
        singles = [Op(INSERT_EVENT, row) for row in events] + ops
        for index, op in enumerate(singles):
            try:
                await self._transaction([], [op])
            except sqlite3.OperationalError:
                self._ops[:0] = singles[index:]
                raise
            except _REFUSALS as exc:
                self.stats.rejected += 1
                log.error("store writer: row refused (%s): %s", exc, op.sql.split("(")[0])
                if op.future is not None and not op.future.done():
                    op.future.set_exception(exc)


def _log_failure(exc: Exception, count: int) -> None:
    """The cause in one line (a full disk retries every second: the 1st, 10th, every 100th);
    a traceback only for what is not SQLite's or the filesystem's doing."""
    if not isinstance(exc, sqlite3.Error | OSError):
        log.exception("store writer: write failed; will retry")
    elif count in (1, 10) or count % 100 == 0:
        log.error("store writer: write failed (%s); held and retried (%d failures)", exc, count)


def _encode(rows: list[Row]) -> str:
    try:
        return json.dumps(rows, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        # A value JSON cannot carry: a bad row, replayed one by one like any SQLite refusal.
        raise sqlite3.InterfaceError(f"an analytics row cannot be encoded: {exc}") from exc


def _groups(ops: list[Op]) -> list[list[Op]]:
    """Consecutive ops with the same SQL and no waiting caller go in one executemany."""
    groups: list[list[Op]] = []
    for op in ops:
        last = groups[-1] if groups else None
        if last and op.future is None and last[0].future is None and last[0].sql == op.sql:
            last.append(op)
        else:
            groups.append([op])
    return groups
