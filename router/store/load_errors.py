"""Load errors in the store (`load_errors`, docs/store.md): one row per failed load, its
reason sanitised and the backend's output cut to its tail. The store's part behind
`Store.load_errors`: `record`, `rows` and `clear`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from router.errors import sanitize
from router.store import analytics as an
from router.store.access import Access
from router.store.writer import Op

MAX_OUTPUT_TAIL = 16 * 1024
_INSERT = (
    "INSERT INTO load_errors (time, node_id, model, backend, reason, exit_code, output_tail,"
    " attempt_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_COLUMNS = (
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


class LoadErrors:
    def __init__(self, access: Access, node_id: str) -> None:
        self._db = access
        self._node_id = node_id

    def record(self, error: Mapping[str, Any]) -> None:
        tail = error.get("output_tail")
        if isinstance(tail, list | tuple):
            tail = "\n".join(map(str, tail))
        row = (
            an.as_float(error.get("time")) or time.time(),
            str(error.get("node_id") or self._node_id),
            an.as_text(error.get("model")),
            an.as_text(error.get("backend")),
            sanitize(str(error.get("reason") or "load failed")),
            an.as_int(error.get("exit_code")),
            None if tail is None else str(tail)[-MAX_OUTPUT_TAIL:],
            an.as_text(error.get("attempt_id")),
        )
        self._db.writer.add_op(Op(_INSERT, row), urgent=True)

    async def rows(self, limit: int = 100) -> list[dict[str, Any]]:
        sql = f"SELECT {', '.join(_COLUMNS)} FROM load_errors ORDER BY time DESC, id DESC LIMIT ?"
        return await self._db.dicts(sql, (limit,), _COLUMNS)

    async def clear(self) -> int:
        return await self._db.write("DELETE FROM load_errors", ())
