"""Memory in GET /router/v1/status (read-only): each runtime's figure and the devices' budget,
used and free. The figure is the measured one when its configuration was measured under the
same fingerprint (`Figures.lookup`, source `measured`), else the estimate. Nothing acts on
these figures yet (docs/residency.md, "Not wired yet").
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from router.config.schema import PROGRAM_SECTIONS, ProgramSection, Settings
from router.domain import Family, Lane
from router.memory.devices import Device, budgets, discover
from router.memory.figures import Figures, NoFigures
from router.memory.fingerprint import launch_fingerprint
from router.memory.ledger import Ledger, Resident, Source, Usage
from router.memory.sizing import estimate_config

_HELD = ("loading", "ready", "stopping")


@dataclass(frozen=True)
class Held:
    """The little of a runtime view the status needs (keeps this module below runtime)."""

    key: str
    config: Any  # ModelConfig
    lane: Lane
    family: Family
    state: str


@functools.lru_cache(maxsize=1)
def machine_devices() -> tuple[Device, ...]:
    """The devices, discovered once per process (totals do not change while it runs)."""
    return discover()


def memory_status(
    held: Iterable[Held],
    settings: Settings,
    devices: tuple[Device, ...],
    figures: Figures | None = None,
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """({runtime key: {"device", "bytes", "source"}}, the `devices` rows). Reads model headers."""
    figures = figures or NoFigures()
    memory = settings.memory
    ledger = Ledger(budgets(devices, memory.host_budget, memory.gpu_budget, memory.reserve))
    per_runtime: dict[str, dict[str, Any]] = {}
    for h in held:
        if h.state not in _HELD:
            continue
        fingerprint = launch_fingerprint(h.config, h.lane, h.family, settings, devices)
        measured = figures.lookup(h.config.id, fingerprint)
        source: Source
        if measured is not None:
            held_bytes, source = dict(measured.devices), "measured"
        else:
            section = getattr(settings, PROGRAM_SECTIONS[h.family])
            env = section.env if isinstance(section, ProgramSection) else {}
            estimate = estimate_config(h.config, h.lane, h.family, devices, env)
            held_bytes, source = dict(estimate.devices), "estimate"
        resident = Resident(h.key, h.config.id, h.lane.value, held_bytes, source=source)
        ledger = ledger.hold(resident)
        usage = Usage.of(resident)
        per_runtime[h.key] = {"device": usage.device, "bytes": usage.bytes, "source": source}
    totals = {d.id: d for d in devices}
    rows = [row | {"kind": totals[row["device"]].kind} for row in ledger.rows()]
    return per_runtime, rows


__all__ = ["Held", "machine_devices", "memory_status"]
