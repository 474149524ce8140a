"""Restore after borrow (docs/lending.md): a helper that loaded its linked model for borrowed
work goes back to the model its lane had before, once the lane has been quiet (no borrowed
and no own work) for `cluster.offload_restore_delay`.

Only the model held *before* the first borrowed run is remembered, so a lane that served
several borrowed models in a row returns to its own, not to an intermediate one. An own
request on the lane cancels the pending restore: the lane now serves what its own clients
asked for. A restore whose load has begun is left to finish (cancelling a load half-way
would leave the lane between two models).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

C = TypeVar("C")  # the model configuration (router.config.ModelConfig in the app)


def remembered(
    pending: C | None, before: C | None, before_id: str | None, borrowed_id: str
) -> C | None:
    """What the lane returns to after a borrowed run starts: the model already remembered,
    else the lane's model before this run when it is another model than the borrowed one."""
    if pending is not None:
        return pending
    if before is None or before_id == borrowed_id:
        return None
    return before


class Restorer(Generic[C]):
    """Per lane: the model to return to, and the timer that does it."""

    def __init__(
        self,
        delay: Callable[[], float],
        quiet: Callable[[str], bool],
        load: Callable[[C, str], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._delay, self._quiet, self._load, self._clock = delay, quiet, load, clock
        self.before: dict[str, C] = {}
        self._last: dict[str, float] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._loading: set[str] = set()

    def pending(self, lane: str) -> C | None:
        return self.before.get(lane)

    def borrowed_arrived(self, lane: str) -> None:
        """Borrowed work is coming: no restore while it waits or runs."""
        self._cancel_timer(lane)

    def borrowed_admitted(
        self, lane: str, before: C | None, before_id: str | None, borrowed_id: str, wanted: bool
    ) -> None:
        """A borrowed request was admitted on `lane`; `before` is the lane's model now."""
        self._cancel_timer(lane)
        if wanted:
            keep = remembered(self.before.get(lane), before, before_id, borrowed_id)
            if keep is not None:
                self.before[lane] = keep

    def borrowed_done(self, lane: str) -> None:
        """A borrowed request ended: the quiet period starts (again)."""
        self._last[lane] = self._clock()
        if lane in self.before and lane not in self._timers:
            self._timers[lane] = asyncio.get_running_loop().create_task(self._run(lane))

    def own_arrived(self, lane: str) -> None:
        """An own request on `lane`: no restore (one already loading finishes)."""
        if lane in self._loading:
            return
        self._cancel_timer(lane)
        self.before.pop(lane, None)

    async def close(self) -> None:
        timers = list(self._timers.values())
        for task in timers:
            task.cancel()
        await asyncio.gather(*timers, return_exceptions=True)

    def _cancel_timer(self, lane: str) -> None:
        if lane in self._loading:
            return
        task = self._timers.pop(lane, None)
        if task is not None:
            task.cancel()

    async def _run(self, lane: str) -> None:
        try:
            while True:
                wait = self._last.get(lane, 0.0) + self._delay() - self._clock()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                if not self._quiet(lane):  # work that did not pass the gate (a direct lease)
                    self._last[lane] = self._clock()
                    continue
                config = self.before.pop(lane, None)
                if config is None:
                    return
                self._loading.add(lane)
                try:
                    await self._load(config, lane)
                except Exception as err:  # a failed restore leaves the lane as it is
                    log.warning("restore after borrow on the %s lane failed: %s", lane, err)
                return
        finally:
            self._loading.discard(lane)
            if self._timers.get(lane) is asyncio.current_task():
                del self._timers[lane]
