"""Waiting on the router's own events instead of a timer: a condition on in-process state is
checked now and again after every event the bus publishes. The runtime manager publishes one
for each change the tests wait for (`activity` within 0.25 s of a lease or queue change, with
the pump's decisions made; `unloading` as a runtime starts to stop), so a wait ends on the
event, and a change that no event follows fails the test at its deadline instead of passing
by luck of a poll."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from router.records.events import EventBus


async def after_events(bus: EventBus, holds: Callable[[], object], deadline: float = 20.0) -> bool:
    """Whether `holds()` came true within `deadline` seconds, checked on each event."""
    async with bus.subscribe() as events:
        try:
            async with asyncio.timeout(deadline):
                while not holds():
                    await events.get()
        except TimeoutError:
            return bool(holds())
    return True
