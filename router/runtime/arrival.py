"""Admission in arrival order (`runtime.residency: memory`; docs/residency.md).

Admission awaits the configuration's estimate (header reads, off the event loop) before a
request is queued. Each request takes a `Turn` when it arrives; its estimate runs at once, but
it goes on to the queue only after every request that arrived before it has been queued or
refused, so a slow first estimate cannot let a later request overtake an earlier one.
"""

from __future__ import annotations

import asyncio


class Turn:
    def __init__(self, previous: Turn | None) -> None:
        self._previous = previous
        self.done = asyncio.Event()

    async def wait(self) -> None:
        """Until every request that arrived before this one has left admission. A request
        that left early (cancelled, or its estimate failed) leaves its own predecessors to
        wait for. Events, not futures: a cancelled waiter must not cancel the others' wait."""
        while self._previous is not None:
            await self._previous.done.wait()
            self._previous = self._previous._previous  # None once that one waited its turn

    def leave(self) -> None:
        """Queued, refused or gone: the next request may go on. The caller queues with no
        await between its turn's end and the queueing, so the order holds."""
        self.done.set()


class ArrivalOrder:
    def __init__(self) -> None:
        self._tail: Turn | None = None

    def enter(self) -> Turn:
        turn = Turn(self._tail)
        self._tail = turn
        return turn


__all__ = ["ArrivalOrder", "Turn"]
