"""Lending in the store (migration 0007, docs/lending.md): the settings saved from the WebUI
(`lending_settings`) and the decision log (`offload_decisions`): `Store.lending`.

Decision rows arrive on the request path: `add_decision` only appends an op for the writer,
which commits them with the next batch. Reads settle first, so a row recorded a moment ago is
in the answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from router.store.access import Access
from router.store.where import Where
from router.store.writer import Op

DECISION_COLUMNS = (
    "id",
    "at",
    "kind",
    "trigger",
    "outcome",
    "reasons",
    "lane",
    "owner_node_id",
    "owner_model_id",
    "helper_node_id",
    "helper_model_id",
    "router_version",
    "detail",
)
_QUOTED = [f'"{c}"' if c == "trigger" else c for c in DECISION_COLUMNS]
_INSERT_DECISION = (
    f"INSERT INTO offload_decisions ({', '.join(_QUOTED[1:])})"
    f" VALUES ({', '.join('?' for _ in _QUOTED[1:])})"
)
_PRUNE = "DELETE FROM offload_decisions WHERE at < ?"
_INSERT_SETTING = "INSERT INTO lending_settings (key, value, updated_at) VALUES (?, ?, ?)"


@dataclass(frozen=True, slots=True)
class DecisionFilter:
    """One page of the log, newest first: ids below `before`, optionally one kind, lane, or
    model (as owner or helper)."""

    limit: int = 100
    before: int | None = None
    kind: str | None = None
    lane: str | None = None
    model_id: str | None = None

    def query(self) -> tuple[str, list[Any]]:
        where = Where()
        where.given("id < ?", self.before)
        where.given("kind = ?", self.kind)
        where.given("lane = ?", self.lane)
        if self.model_id is not None:
            where.add("(owner_model_id = ? OR helper_model_id = ?)", self.model_id, self.model_id)
        table = f"offload_decisions{where.clause()}"
        sql = f"SELECT {', '.join(_QUOTED)} FROM {table} ORDER BY id DESC LIMIT ?"
        return sql, [*where.params, self.limit + 1]


def _decision(row: Sequence[Any]) -> dict[str, Any]:
    out = dict(zip(DECISION_COLUMNS, row, strict=True))
    out["reasons"] = json.loads(out["reasons"])
    out["detail"] = json.loads(out["detail"])
    return out


class LendingRows:
    def __init__(self, access: Access) -> None:
        self._db = access
        # The decision log's retention in seconds, once the lending settings are known (the
        # writer's hourly pass prunes with it; None until then).
        self.decision_retention: float | None = None

    # -- saved settings -----------------------------------------------------------------

    async def saved(self) -> dict[str, Any]:
        rows = await self._db.rows("SELECT key, value FROM lending_settings")
        return {key: json.loads(value) for key, value in rows}

    async def replace_saved(self, saved: Mapping[str, Any]) -> None:
        """The saved layer becomes `saved`, in one transaction; returns once it is on disk."""
        now = time.time()
        ops: list[tuple[str, Sequence[Any]]] = [("DELETE FROM lending_settings", ())]
        ops += [(_INSERT_SETTING, (key, json.dumps(value), now)) for key, value in saved.items()]
        await self._db.write_together(ops)

    # -- decision log -------------------------------------------------------------------

    def add_decision(self, row: Sequence[Any]) -> None:
        """One row (the columns after `id`), written with the next batch: O(1), no await."""
        self._db.writer.add_op(Op(_INSERT_DECISION, tuple(row)))

    async def decision_page(self, filters: DecisionFilter) -> dict[str, Any]:
        sql, params = filters.query()
        rows = await self._db.rows(sql, params)
        page = [_decision(row) for row in rows[: filters.limit]]
        more = len(rows) > filters.limit
        return {"decisions": page, "next_before": page[-1]["id"] if more and page else None}

    async def prune_decisions(self, retention: float) -> int:
        """Delete decisions older than `retention` seconds now; returns how many."""
        return await self._db.write(_PRUNE, (time.time() - retention,))

    async def prune_in(self, db: aiosqlite.Connection) -> None:
        """The writer's hourly pass (Store._delete_expired), on the writer's connection."""
        if self.decision_retention is not None:
            await db.execute(_PRUNE, (time.time() - self.decision_retention,))
