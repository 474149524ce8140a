"""The memory picture at one moment, as every reader sees it: GET /router/v1/status, the
/metrics scrape and the cluster snapshot a node reports all call `memory_now`, so the three
can never disagree (one computation path; docs/residency.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from router.config.schema import Settings
from router.domain import Family, Lane
from router.memory.status import Held, machine_devices, memory_status


class _State(Protocol):
    @property
    def value(self) -> str: ...


class HeldView(Protocol):
    """The part of a runtime view read here (router/runtime sits above this package)."""

    @property
    def key(self) -> str: ...
    @property
    def config(self) -> Any: ...
    @property
    def lane(self) -> Lane: ...
    @property
    def family(self) -> Family: ...
    @property
    def state(self) -> _State: ...


@dataclass(frozen=True)
class MemoryNow:
    """`runtimes`: {runtime key: {"device", "bytes", "source"}} for each runtime holding memory;
    `devices`: the status rows (device, budget, used, free, kind); `held`: each runtime's model
    and lane (the labels a metric needs)."""

    runtimes: dict[str, dict[str, Any]] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    held: dict[str, Held] = field(default_factory=dict)


def memory_now_sync(views: Iterable[HeldView], settings: Settings) -> MemoryNow:
    """Reads model headers (cached) and, once per process, NVML: call it off the event loop."""
    held = [Held(v.key, v.config, v.lane, v.family, v.state.value) for v in views]
    runtimes, devices = memory_status(held, settings, machine_devices())
    return MemoryNow(runtimes, devices, {h.key: h for h in held if h.key in runtimes})


async def memory_now(views: Iterable[HeldView], settings: Settings) -> MemoryNow:
    """`memory_now_sync` in a thread; the views are read here, on the loop, first."""
    snapshot = list(views)
    return await asyncio.to_thread(memory_now_sync, snapshot, settings)


__all__ = ["HeldView", "MemoryNow", "memory_now", "memory_now_sync"]
