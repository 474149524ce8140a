"""Who waits for which runtime, per lane: requests (`Waiter`) and blocked loads (`Claim`).

A claim is a load that needs a lane emptied first. The scheduler sees it like a request for
that runtime, so the lane batches, drains and stops its current runtime in the ordinary way;
a claim is satisfied (dropped) when its runtime loads, and never gets a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from router.domain import Lane
from router.errors import RouterError
from router.runtime.scheduler import WaiterView, bypasses
from router.runtime.state import Lease, RuntimeSpec


@dataclass(eq=False)
class Waiter:
    """A request waiting for a lease on `spec`'s runtime."""

    spec: RuntimeSpec
    enqueued_at: float
    lane: Lane
    future: asyncio.Future[Lease]
    bypassed: int = 0  # newer requests granted ahead of this one (runtime.max_bypass)

    @property
    def gone(self) -> bool:
        """Granted, failed or abandoned: nothing left to wait for."""
        return self.future.done()


@dataclass(eq=False)
class Claim:
    """A load of `spec` blocked until `lane` is empty."""

    spec: RuntimeSpec
    enqueued_at: float
    lane: Lane
    bypassed: int = 0
    gone = False


Entry = Waiter | Claim


@dataclass(eq=False)
class Ticket:
    """Handed to `ensure()` by a caller that wants to follow its own request's place in the
    queue (the SSE wait announcements); the manager fills in the waiter when it queues."""

    waiter: Waiter | None = None


class Queues:
    def __init__(self) -> None:
        self._lanes: dict[Lane, list[Entry]] = {lane: [] for lane in Lane}

    def entries(self, lane: Lane) -> list[Entry]:
        """The lane's live entries in queue order (finished waiters are dropped first)."""
        queue = self._lanes[lane]
        queue[:] = [e for e in queue if not e.gone]
        return list(queue)

    def waiting(self, lane: Lane) -> int:
        """Requests (not claims) waiting in `lane`."""
        return sum(1 for e in self._lanes[lane] if isinstance(e, Waiter) and not e.gone)

    def waiting_for(self, key: str) -> int:
        return sum(
            1
            for queue in self._lanes.values()
            for e in queue
            if isinstance(e, Waiter) and not e.gone and e.spec.key == key
        )

    def is_empty(self, lane: Lane) -> bool:
        return not self._lanes[lane]

    def any(self) -> bool:
        return any(self._lanes.values())

    def wants(self, key: str) -> bool:
        return any(e.spec.key == key for queue in self._lanes.values() for e in queue)

    def scheduler_view(self, lane: Lane) -> list[WaiterView]:
        return [WaiterView(e.spec.key, e.enqueued_at, e.bypassed) for e in self.entries(lane)]

    def note_grants(self, entries: list[Entry], granted: tuple[int, ...]) -> None:
        """Count, on each entry of `entries` (one lane's, in queue order), the newer ones in
        `granted` that went ahead of it (the `max_bypass` bound)."""
        for entry, passed in zip(entries, bypasses(len(entries), granted), strict=True):
            entry.bypassed += passed

    def add(self, waiter: Waiter) -> None:
        self._lanes[waiter.lane].append(waiter)

    def remove(self, entry: Entry) -> None:
        with contextlib.suppress(ValueError):
            self._lanes[entry.lane].remove(entry)

    def claim(self, lane: Lane, spec: RuntimeSpec, now: float) -> bool:
        """Put a claim for `spec` at the head of `lane` unless one is there; True if added."""
        queue = self._lanes[lane]
        if any(isinstance(e, Claim) and e.spec.key == spec.key for e in queue):
            return False
        queue.insert(0, Claim(spec, now, lane))
        return True

    def drop_claims(self, key: str) -> None:
        for queue in self._lanes.values():
            queue[:] = [e for e in queue if not (isinstance(e, Claim) and e.spec.key == key)]

    def fail(self, key: str, error: RouterError) -> None:
        """Everything waiting for `key` ends with `error` (its load failed)."""
        for queue in self._lanes.values():
            for entry in [e for e in queue if e.spec.key == key]:
                queue.remove(entry)
                if isinstance(entry, Waiter) and not entry.future.done():
                    entry.future.set_exception(error)

    def refuse_all(self, error: RouterError) -> None:
        for queue in self._lanes.values():
            for entry in queue:
                if isinstance(entry, Waiter) and not entry.future.done():
                    entry.future.set_exception(error)
            queue.clear()
