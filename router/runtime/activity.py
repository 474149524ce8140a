"""The `activity` event: queue lengths and requests in flight, coalesced.

Both change on every request, and an event per request would cost every subscriber (each
browser tab) work on the request path. Instead a change only arms a timer; when it fires, the
current numbers are published once, and only if they differ from the last ones sent. So a
subscriber sees at most one `activity` event per DELAY, whatever the request rate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

DELAY = 0.25
Snapshot = Callable[[], dict[str, Any]]


class ActivityReporter:
    def __init__(
        self,
        publish: Callable[..., Any],
        snapshot: Snapshot,
        delay: float = DELAY,
        *,
        event: str = "activity",
        same: Callable[[dict[str, Any]], Any] = lambda numbers: numbers,
    ) -> None:
        self._publish = publish
        self._snapshot = snapshot
        self._delay = delay
        self._event = event
        self._same = same  # what must differ for a new event (the whole snapshot by default)
        self._timer: asyncio.TimerHandle | None = None
        self._last: Any = None

    def poke(self) -> None:
        """Something changed; publish the numbers soon (cheap: one check when armed)."""
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (a unit test driving the manager by hand): nothing to report
            self._timer = loop.call_later(self._delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        current = self._snapshot()
        seen = self._same(current)
        if seen != self._last:
            self._last = seen
            self._publish(self._event, **current)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
