"""The memory ledger: each device's budget, and what every resident runtime holds there
(pure data and arithmetic; the runtime manager will own the one live instance).

A stopping runtime keeps its bytes until its process has exited (`exited`): a hung backend can
take `stop_grace` to die, and a load must never count on memory that is not free yet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Source = Literal["estimate", "measured"]
State = Literal["loading", "ready", "stopping"]


@dataclass(frozen=True)
class Resident:
    """One runtime as the ledger and the eviction rule see it.

    `busy`: requests in flight (or queued for it); `pinned`: its .kcpps sets `router_pin`.
    `load_seconds`: its measured load time (None: never measured); `recent_uses`: how often it
    served lately (the caller picks the window; 0 once its idle deadline has passed, so it goes
    first); `last_used`: a clock reading, for tie-breaks.
    """

    key: str
    model: str
    lane: str
    devices: Mapping[str, int]
    source: Source = "estimate"
    state: State = "ready"
    busy: bool = False
    pinned: bool = False
    load_seconds: float | None = None
    recent_uses: float = 0.0
    last_used: float = 0.0
    in_flight: int = 0
    # A client asked to keep it loaded (`keep_alive`) and that time has not run out: chosen
    # only when no set without it frees enough.
    kept: bool = False

    @property
    def total(self) -> int:
        return sum(self.devices.values())


@dataclass(frozen=True)
class Ledger:
    budgets: Mapping[str, int]
    residents: tuple[Resident, ...] = ()

    def used(self, device: str) -> int:
        return sum(r.devices.get(device, 0) for r in self.residents)

    def free(self, device: str) -> int:
        """Budget left on `device`; negative when the residents already exceed it."""
        return self.budgets.get(device, 0) - self.used(device)

    def get(self, key: str) -> Resident | None:
        return next((r for r in self.residents if r.key == key), None)

    def hold(self, resident: Resident) -> Ledger:
        """Add `resident`, or replace the entry with its key (a measurement, a new state)."""
        others = tuple(r for r in self.residents if r.key != resident.key)
        return dataclasses.replace(self, residents=(*others, resident))

    def stopping(self, key: str) -> Ledger:
        found = self.get(key)
        return self if found is None else self.hold(dataclasses.replace(found, state="stopping"))

    def exited(self, key: str) -> Ledger:
        """The runtime's process is gone: only now are its bytes free."""
        return dataclasses.replace(self, residents=tuple(r for r in self.residents if r.key != key))

    def rows(self) -> list[dict[str, Any]]:
        """`devices` of GET /router/v1/status: budget, used, free per device, in budget order."""
        return [
            {"device": d, "budget": b, "used": self.used(d), "free": max(0, self.free(d))}
            for d, b in self.budgets.items()
        ]


@dataclass(frozen=True)
class Usage:
    """One runtime's line in the status: where its bytes are and how they were learnt."""

    device: str
    bytes: int
    source: Source
    by_device: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, resident: Resident) -> Usage:
        # `device` names where most of it lives (a GPU when it holds anything).
        main = max(
            resident.devices, key=lambda d: (d != "host", resident.devices[d]), default="host"
        )
        return cls(main, resident.total, resident.source, dict(resident.devices))


__all__ = ["Ledger", "Resident", "Source", "State", "Usage"]
