"""What each part of the store is handed (`Store.benchmarks`, `.downloads`, ...): the store's
one writer, its reader connection, and the settle-before-read.

The reader is looked up on every read, not kept: the store may open a fresh file and move its
connections there while the router runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiosqlite

from router.store.writer import Op, Writer


class Access:
    def __init__(
        self,
        writer: Writer,
        reader: Callable[[], aiosqlite.Connection],
        settle: Callable[[], Awaitable[None]],
    ) -> None:
        self.writer = writer
        self._reader = reader
        self._settle = settle

    @property
    def reader(self) -> aiosqlite.Connection:
        return self._reader()

    async def settle(self) -> None:
        """Before a read: everything recorded so far is in the database."""
        await self._settle()

    async def write(self, sql: str, params: Sequence[Any]) -> int:
        """One statement, written at once; returns its row count once it is on disk."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.writer.add_op(Op(sql, tuple(params), future), urgent=True)
        return await future

    async def write_together(self, ops: Sequence[tuple[str, Sequence[Any]]]) -> list[int]:
        """Several statements in one transaction: queued with no await between them, so the
        writer commits them in one batch (a reader sees all or none); their row counts."""
        loop = asyncio.get_running_loop()
        queued = [Op(sql, tuple(params), loop.create_future()) for sql, params in ops]
        for index, op in enumerate(queued):
            self.writer.add_op(op, urgent=index == len(queued) - 1)
        counts = []
        for op in queued:
            assert op.future is not None
            counts.append(await op.future)
        return counts

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Settled, then every row of `sql`."""
        await self.settle()
        async with self.reader.execute(sql, params) as cursor:
            return [tuple(row) for row in await cursor.fetchall()]

    async def dicts(
        self, sql: str, params: Sequence[Any], columns: Sequence[str]
    ) -> list[dict[str, Any]]:
        """Settled, then every row of `sql` as a dict of `columns`."""
        return [dict(zip(columns, row, strict=True)) for row in await self.rows(sql, params)]
