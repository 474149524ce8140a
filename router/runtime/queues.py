"""Who waits for which runtime, per lane: requests (`Waiter`), in arrival order. A load
that must see other runtimes gone first waits as its pump's pending plan (pump.py), not here.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from router.domain import ANONYMOUS, Caller, Lane
from router.errors import RouterError
from router.runtime.policy import WaiterView
from router.runtime.state import Lease, RuntimeSpec


@dataclass(eq=False)
class Waiter:
    """A request waiting for a lease on `spec`'s runtime."""

    spec: RuntimeSpec
    enqueued_at: float
    lane: Lane
    future: asyncio.Future[Lease]
    bypassed: int = 0  # newer requests granted ahead of this one (runtime.max_bypass)
    trace: object = None  # its trace context: the parent of a load it starts (load_trace.py)
    caller: Caller = ANONYMOUS  # its class, fairness name and cap (router/runtime/fair.py)

    @property
    def gone(self) -> bool:
        """Granted, failed or abandoned: nothing left to wait for."""
        return self.future.done()


@dataclass(eq=False)
class Ticket:
    """Handed to `ensure()` by a caller that wants to follow its own request's place in the
    queue (the SSE wait announcements); the manager fills in the waiter when it queues."""

    waiter: Waiter | None = None


class Queues:
    def __init__(self) -> None:
        self._lanes: dict[Lane, list[Waiter]] = {lane: [] for lane in Lane}

    def entries(self, lane: Lane) -> list[Waiter]:
        """The lane's live entries in queue order (finished waiters are dropped first)."""
        queue = self._lanes[lane]
        queue[:] = [e for e in queue if not e.gone]
        return list(queue)

    def waiting(self, lane: Lane) -> int:
        """Requests waiting in `lane`."""
        return sum(1 for e in self._lanes[lane] if not e.gone)

    def waiting_for(self, key: str) -> int:
        return sum(
            1 for queue in self._lanes.values() for e in queue if not e.gone and e.spec.key == key
        )

    def is_empty(self, lane: Lane) -> bool:
        return not self._lanes[lane]

    def any(self) -> bool:
        return any(self._lanes.values())

    def wants(self, key: str) -> bool:
        return any(e.spec.key == key for queue in self._lanes.values() for e in queue)

    def scheduler_view(self, lane: Lane) -> list[WaiterView]:
        return [
            WaiterView(e.spec.key, e.enqueued_at, e.bypassed, e.caller) for e in self.entries(lane)
        ]

    def note_grants(self, entries: list[Waiter], passed: list[int]) -> None:
        """Count, on each entry of `entries` (one lane's, in arrival order), the grants that
        went ahead of it from behind it in serve order (policy.passed; `max_bypass`)."""
        for entry, count in zip(entries, passed, strict=True):
            entry.bypassed += count

    def add(self, waiter: Waiter) -> None:
        self._lanes[waiter.lane].append(waiter)

    def remove(self, entry: Waiter) -> None:
        with contextlib.suppress(ValueError):
            self._lanes[entry.lane].remove(entry)

    def fail(self, key: str, error: RouterError) -> None:
        """Everything waiting for `key` ends with `error` (its load failed)."""
        for queue in self._lanes.values():
            for entry in [e for e in queue if e.spec.key == key]:
                queue.remove(entry)
                if not entry.future.done():
                    entry.future.set_exception(error)

    def refuse_all(self, error: RouterError) -> None:
        for queue in self._lanes.values():
            for entry in queue:
                if not entry.future.done():
                    entry.future.set_exception(error)
            queue.clear()
