"""Lending in the store (migration 0007, docs/lending.md): the settings saved from the WebUI
(`lending_settings`) and the decision log (`offload_decisions`). A mixin of `Store`.

Decision rows arrive on the request path: `add_decision` only appends an op for the writer,
which commits them with the next batch. Reads settle first, so a row recorded a moment ago is
in the answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from router.store.writer import Op, Writer

DECISION_COLUMNS = (
    "id", "at", "kind", "trigger", "outcome", "reasons", "lane", "owner_node_id",
    "owner_model_id", "helper_node_id", "helper_model_id", "router_version", "detail",
)  # fmt: skip
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
        where: list[str] = []
        params: list[Any] = []
        if self.before is not None:
            where.append("id < ?")
            params.append(self.before)
        for column, value in (("kind", self.kind), ("lane", self.lane)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if self.model_id is not None:
            where.append("(owner_model_id = ? OR helper_model_id = ?)")
            params += [self.model_id, self.model_id]
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"SELECT {', '.join(_QUOTED)} FROM offload_decisions{clause} ORDER BY id DESC LIMIT ?"
        return sql, [*params, self.limit + 1]


def _decision(row: Sequence[Any]) -> dict[str, Any]:
    out = dict(zip(DECISION_COLUMNS, row, strict=True))
    out["reasons"] = json.loads(out["reasons"])
    out["detail"] = json.loads(out["detail"])
    return out


class LendingRows:
    """What `Store` provides to this mixin: its writer, its reader and `_settle()`."""

    _writer: Writer
    _reader: aiosqlite.Connection
    # The decision log's retention in seconds, once the lending settings are known (the
    # writer's hourly pass prunes with it; None until then).
    decision_retention: float | None = None

    async def _settle(self) -> None:
        raise NotImplementedError

    # -- saved settings -----------------------------------------------------------------

    async def lending_saved(self) -> dict[str, Any]:
        await self._settle()
        async with self._reader.execute("SELECT key, value FROM lending_settings") as cursor:
            rows = await cursor.fetchall()
        return {key: json.loads(value) for key, value in rows}

    async def replace_lending_saved(self, saved: Mapping[str, Any]) -> None:
        """The saved layer becomes `saved`, in one transaction (the ops are queued with no
        await between them); returns once it is on disk."""
        loop = asyncio.get_running_loop()
        now = time.time()
        ops = [Op("DELETE FROM lending_settings", (), loop.create_future())]
        ops += [
            Op(_INSERT_SETTING, (key, json.dumps(value), now), loop.create_future())
            for key, value in saved.items()
        ]
        for index, op in enumerate(ops):
            self._writer.add_op(op, urgent=index == len(ops) - 1)
        for op in ops:
            assert op.future is not None
            await op.future

    # -- decision log -------------------------------------------------------------------

    def add_decision(self, row: Sequence[Any]) -> None:
        """One row (the columns after `id`), written with the next batch: O(1), no await."""
        self._writer.add_op(Op(_INSERT_DECISION, tuple(row)))

    async def decision_page(self, filters: DecisionFilter) -> dict[str, Any]:
        await self._settle()
        sql, params = filters.query()
        async with self._reader.execute(sql, params) as cursor:
            rows = list(await cursor.fetchall())
        page = [_decision(row) for row in rows[: filters.limit]]
        more = len(rows) > filters.limit
        return {"decisions": page, "next_before": page[-1]["id"] if more and page else None}

    async def prune_decisions(self, retention: float) -> int:
        """Delete decisions older than `retention` seconds now; returns how many."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._writer.add_op(Op(_PRUNE, (time.time() - retention,), future), urgent=True)
        return await future

    async def _prune_decisions_in(self, db: aiosqlite.Connection) -> None:
        """The writer's hourly pass (Store._delete_expired), on the writer's connection."""
        if self.decision_retention is not None:
            await db.execute(_PRUNE, (time.time() - self.decision_retention,))
