"""Measured memory figures in the store (migration 0008, docs/residency.md): `Store.memory`.

One row per configuration and fingerprint, replaced by each new measurement; the in-memory
cache the ledger reads is router/memory/book.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from router.store.access import Access

FIGURE_COLUMNS = (
    "config_id",
    "fingerprint",
    "devices",
    "load_seconds",
    "oom",
    "method",
    "measured_at",
)
_UPSERT = (
    f"INSERT OR REPLACE INTO memory_figures ({', '.join(FIGURE_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(FIGURE_COLUMNS))})"
)


class MemoryFigureRows:
    def __init__(self, access: Access) -> None:
        self._db = access

    async def save(self, row: Mapping[str, Any]) -> None:
        """Write one figure (`devices` a mapping of device -> bytes); on disk when it returns."""
        values = dict(row)
        values["devices"] = json.dumps(dict(values["devices"]), sort_keys=True)
        values["oom"] = 1 if values["oom"] else 0
        await self._db.write(_UPSERT, [values[c] for c in FIGURE_COLUMNS])

    async def rows(self) -> list[dict[str, Any]]:
        """Every figure, newest first, with `devices` as a dict and `oom` as a bool."""
        sql = (
            f"SELECT {', '.join(FIGURE_COLUMNS)} FROM memory_figures"
            " ORDER BY measured_at DESC, config_id, fingerprint"
        )
        out = await self._db.dicts(sql, (), FIGURE_COLUMNS)
        for row in out:
            row["devices"] = {str(k): int(v) for k, v in json.loads(row["devices"]).items()}
            row["oom"] = bool(row["oom"])
        return out
