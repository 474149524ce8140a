"""Long-lived connections that shutdown must end rather than wait for.

A realtime WebSocket has no natural end a drain could wait for, so the server tells every open
session to go away (close code 1001) as soon as the listeners close (docs/vllm.md, R28).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class Sessions:
    """The open sessions' stop signals, set by `going_away()` at shutdown."""

    def __init__(self) -> None:
        self._stops: set[asyncio.Event] = set()
        self.closing = False

    @contextlib.contextmanager
    def opened(self) -> Iterator[asyncio.Event]:
        stop = asyncio.Event()
        if self.closing:
            stop.set()
        self._stops.add(stop)
        try:
            yield stop
        finally:
            self._stops.discard(stop)

    def going_away(self) -> None:
        self.closing = True
        for stop in self._stops:
            stop.set()
