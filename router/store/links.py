"""Lending links in the store (`routing_links`, docs/lending.md): `Store.links`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from router.store.access import Access

LINK_COLUMNS = (
    "lane",
    "owner_node_id",
    "owner_model_id",
    "helper_node_id",
    "helper_model_id",
    "load_if_unloaded",
    "restore_after_borrow",
)
_INSERT = (
    f"INSERT OR REPLACE INTO routing_links ({', '.join(LINK_COLUMNS)}, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_DELETE_ANCHOR = (
    "DELETE FROM routing_links WHERE lane = ? AND ("
    "(owner_node_id = ? AND owner_model_id = ?) OR (helper_node_id = ? AND helper_model_id = ?))"
)


class RoutingLinks:
    def __init__(self, access: Access) -> None:
        self._db = access

    async def rows(self) -> list[dict[str, Any]]:
        sql = f"SELECT {', '.join(LINK_COLUMNS)} FROM routing_links ORDER BY {', '.join(LINK_COLUMNS[:5])}"
        out = await self._db.dicts(sql, (), LINK_COLUMNS)
        for row in out:
            row["load_if_unloaded"] = bool(row["load_if_unloaded"])
            row["restore_after_borrow"] = bool(row["restore_after_borrow"])
        return out

    async def replace(
        self, lane: str, anchor: tuple[str, str], rows: Sequence[tuple[Any, ...]]
    ) -> int:
        """Remove every link of `anchor` on `lane` and insert `rows`; returns the number
        removed, in one transaction: a reader sees the old set or the new one, never a mix."""
        node_id, model_id = anchor
        now = time.time()
        ops: list[tuple[str, Sequence[Any]]] = [
            (_DELETE_ANCHOR, (lane, node_id, model_id, node_id, model_id))
        ]
        ops += [(_INSERT, (*row, now)) for row in rows]
        return (await self._db.write_together(ops))[0]
