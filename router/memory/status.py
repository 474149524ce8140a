"""The machine's memory devices, discovered once per process (the runtime manager's live
ledger, router/runtime/holdings.py, builds GET /router/v1/status's memory from them)."""

from __future__ import annotations

import functools

from router.memory.devices import Device, discover


@functools.lru_cache(maxsize=1)
def machine_devices() -> tuple[Device, ...]:
    """The devices, discovered once per process (totals do not change while it runs)."""
    return discover()


__all__ = ["machine_devices"]
