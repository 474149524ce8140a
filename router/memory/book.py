"""The measured figures, cached in memory over the store (`Figures` for the ledger).

`lookup` reads the cache only (no I/O: the ledger asks it on the event loop, per load and per
status request); `record` updates the cache at once and returns when the row is on disk, so a
figure survives a restart. The cache holds one entry per configuration id and fingerprint, as
the store does (router/store/memory_figures.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from router.memory.figures import Measured
from router.memory.measure import Method


class FigureRows(Protocol):
    """The store part (Store.memory)."""

    async def save(self, row: Mapping[str, Any]) -> None: ...
    async def rows(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Entry:
    measured: Measured
    method: Method
    measured_at: float


class FigureBook:
    def __init__(self, rows: FigureRows, clock: Callable[[], float] = time.time) -> None:
        self._rows = rows
        self._clock = clock
        self._cache: dict[tuple[str, str], Entry] = {}

    async def load(self) -> None:
        """Fill the cache from the store (once, at start-up)."""
        for row in await self._rows.rows():
            measured = Measured(dict(row["devices"]), row["load_seconds"], bool(row["oom"]))
            key = (row["config_id"], row["fingerprint"])
            self._cache[key] = Entry(measured, row["method"], float(row["measured_at"]))

    def lookup(self, config_id: str, fingerprint: str) -> Measured | None:
        entry = self._cache.get((config_id, fingerprint))
        return entry.measured if entry is not None else None

    def entry(self, config_id: str, fingerprint: str) -> Entry | None:
        return self._cache.get((config_id, fingerprint))

    def latest(self, config_id: str) -> tuple[str, Entry] | None:
        """The newest figure of a configuration under any fingerprint: (fingerprint, entry)."""
        found = [(fp, e) for (cid, fp), e in self._cache.items() if cid == config_id]
        return max(found, key=lambda item: item[1].measured_at) if found else None

    async def record(
        self, config_id: str, fingerprint: str, measured: Measured, method: Method
    ) -> None:
        now = self._clock()
        self._cache[(config_id, fingerprint)] = Entry(measured, method, now)
        await self._rows.save(
            {
                "config_id": config_id,
                "fingerprint": fingerprint,
                "devices": dict(measured.devices),
                "load_seconds": measured.load_seconds,
                "oom": measured.oom,
                "method": method,
                "measured_at": now,
            }
        )


__all__ = ["Entry", "FigureBook", "FigureRows"]
