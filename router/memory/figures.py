"""What a measured load left behind, and where the ledger asks for it (issue 25).

Two sides meet here: the measurement (after a load: the backend's own report, else the
process tree's memory and NVML per-process use) records a `Measured` per configuration,
and the ledger asks `Figures.lookup` before falling back to the estimate. The key is the
configuration's id and a fingerprint of what decides its memory (its file hash and the
model files' hashes, the context and slot settings), so an edited configuration is
estimated afresh instead of reusing a stale measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Measured:
    """One configuration's measured residency: bytes per device, how long its load took, and
    why the last load failed when it ran out of memory (`oom`: the figure was raised)."""

    devices: Mapping[str, int] = field(default_factory=dict)
    load_seconds: float | None = None
    oom: bool = False

    @property
    def total(self) -> int:
        return sum(self.devices.values())


class Figures(Protocol):
    """The store of measured figures as the ledger sees it (no I/O on lookup: cached)."""

    def lookup(self, config_id: str, fingerprint: str) -> Measured | None: ...


class NoFigures:
    """Nothing measured yet (tests of the pure core; a router before its store is open)."""

    def lookup(self, config_id: str, fingerprint: str) -> Measured | None:
        return None


__all__ = ["Figures", "Measured", "NoFigures"]
