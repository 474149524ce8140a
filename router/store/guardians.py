"""Guardian assignments in the store (`guardian_models`, docs/guardians.md): a mixin of `Store`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiosqlite

from router.store.writer import Op, Writer

GUARDIAN_COLUMNS = ("scope", "node_id", "model_id", "guardian_node_id", "guardian_model_id")
_UPSERT = (
    "INSERT INTO guardian_models (scope, node_id, model_id, guardian_node_id,"
    " guardian_model_id, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (scope, node_id, model_id) DO UPDATE SET"
    " guardian_node_id = excluded.guardian_node_id,"
    " guardian_model_id = excluded.guardian_model_id, updated_at = excluded.updated_at"
)
_DELETE = "DELETE FROM guardian_models WHERE scope = ? AND node_id = ? AND model_id = ?"


class GuardianAssignments:
    """What `Store` provides to this mixin: its writer, its reader and `_settle()`."""

    _writer: Writer
    _reader: aiosqlite.Connection

    async def _settle(self) -> None:
        raise NotImplementedError

    async def guardian_rows(self) -> list[dict[str, Any]]:
        await self._settle()
        sql = f"SELECT {', '.join(GUARDIAN_COLUMNS)} FROM guardian_models ORDER BY scope, node_id, model_id"
        async with self._reader.execute(sql) as cursor:
            rows = await cursor.fetchall()
        return [dict(zip(GUARDIAN_COLUMNS, row, strict=True)) for row in rows]

    async def save_guardian(self, row: tuple[str, str, str, str, str]) -> None:
        """Insert or replace one assignment; returns once it is on disk."""
        await self._write(_UPSERT, (*row, time.time()))

    async def delete_guardian(self, scope: str, node_id: str, model_id: str) -> int:
        return await self._write(_DELETE, (scope, node_id, model_id))

    async def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._writer.add_op(Op(sql, params, future), urgent=True)
        return await future
