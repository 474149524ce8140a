"""Lending links in the store (`routing_links`, docs/lending.md): a mixin of `Store`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import aiosqlite

from router.store.writer import Op, Writer

LINK_COLUMNS = (
    "lane", "owner_node_id", "owner_model_id", "helper_node_id", "helper_model_id",
    "load_if_unloaded", "restore_after_borrow",
)  # fmt: skip
_INSERT = (
    f"INSERT OR REPLACE INTO routing_links ({', '.join(LINK_COLUMNS)}, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_DELETE_ANCHOR = (
    "DELETE FROM routing_links WHERE lane = ? AND ("
    "(owner_node_id = ? AND owner_model_id = ?) OR (helper_node_id = ? AND helper_model_id = ?))"
)


class RoutingLinks:
    """What `Store` provides to this mixin: its writer, its reader and `_settle()`."""

    _writer: Writer
    _reader: aiosqlite.Connection

    async def _settle(self) -> None:
        raise NotImplementedError

    async def link_rows(self) -> list[dict[str, Any]]:
        await self._settle()
        sql = f"SELECT {', '.join(LINK_COLUMNS)} FROM routing_links ORDER BY {', '.join(LINK_COLUMNS[:5])}"
        async with self._reader.execute(sql) as cursor:
            rows = await cursor.fetchall()
        out = [dict(zip(LINK_COLUMNS, row, strict=True)) for row in rows]
        for row in out:
            row["load_if_unloaded"] = bool(row["load_if_unloaded"])
            row["restore_after_borrow"] = bool(row["restore_after_borrow"])
        return out

    async def replace_links(
        self, lane: str, anchor: tuple[str, str], rows: Sequence[tuple[Any, ...]]
    ) -> int:
        """Remove every link of `anchor` on `lane` and insert `rows`; returns the number
        removed. The ops are queued together with no await between them, so the writer puts
        them in one transaction: a reader sees the old set or the new one, never a mix."""
        node_id, model_id = anchor
        now = time.time()
        loop = asyncio.get_running_loop()
        ops = [
            Op(_DELETE_ANCHOR, (lane, node_id, model_id, node_id, model_id), loop.create_future())
        ]
        ops += [Op(_INSERT, (*row, now), loop.create_future()) for row in rows]
        for index, op in enumerate(ops):
            self._writer.add_op(op, urgent=index == len(ops) - 1)
        counts = [await op.future for op in ops if op.future is not None]
        return counts[0]
