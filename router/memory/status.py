"""Memory in GET /router/v1/status (read-only): each runtime's estimate and the devices' budget,
used and free. Estimates only: no measurement is taken yet, and nothing acts on these figures
(docs/residency.md, "Not wired yet").
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from router.config.schema import PROGRAM_SECTIONS, ProgramSection, Settings
from router.domain import Family, Lane
from router.memory.devices import Device, budgets, discover
from router.memory.ledger import Ledger, Resident, Usage
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
    held: Iterable[Held], settings: Settings, devices: tuple[Device, ...]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """({runtime key: {"device", "bytes", "source"}}, the `devices` rows). Reads model headers."""
    memory = settings.memory
    ledger = Ledger(budgets(devices, memory.host_budget, memory.gpu_budget, memory.reserve))
    per_runtime: dict[str, dict[str, Any]] = {}
    for h in held:
        if h.state not in _HELD:
            continue
        section = getattr(settings, PROGRAM_SECTIONS[h.family])
        env = section.env if isinstance(section, ProgramSection) else {}
        estimate = estimate_config(h.config, h.lane, h.family, devices, env)
        resident = Resident(h.key, h.config.id, h.lane.value, dict(estimate.devices))
        ledger = ledger.hold(resident)
        usage = Usage.of(resident)
        per_runtime[h.key] = {"device": usage.device, "bytes": usage.bytes, "source": "estimate"}
    totals = {d.id: d for d in devices}
    rows = [row | {"kind": totals[row["device"]].kind} for row in ledger.rows()]
    return per_runtime, rows


__all__ = ["Held", "machine_devices", "memory_status"]
