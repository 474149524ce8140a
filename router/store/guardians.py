"""Guardian assignments in the store (`guardian_models`, docs/guardians.md): `Store.guardians`."""

from __future__ import annotations

import time
from typing import Any

from router.store.access import Access
from router.store.upsert import upsert_sql

GUARDIAN_COLUMNS = ("scope", "node_id", "model_id", "guardian_node_id", "guardian_model_id")
_UPSERT = upsert_sql(
    "guardian_models", (*GUARDIAN_COLUMNS, "updated_at"), "scope", "node_id", "model_id"
)
_DELETE = "DELETE FROM guardian_models WHERE scope = ? AND node_id = ? AND model_id = ?"


class GuardianAssignments:
    def __init__(self, access: Access) -> None:
        self._db = access

    async def rows(self) -> list[dict[str, Any]]:
        sql = f"SELECT {', '.join(GUARDIAN_COLUMNS)} FROM guardian_models ORDER BY scope, node_id, model_id"
        return await self._db.dicts(sql, (), GUARDIAN_COLUMNS)

    async def save(self, row: tuple[str, str, str, str, str]) -> None:
        """Insert or replace one assignment; returns once it is on disk."""
        await self._db.write(_UPSERT, (*row, time.time()))

    async def delete(self, scope: str, node_id: str, model_id: str) -> int:
        return await self._db.write(_DELETE, (scope, node_id, model_id))
