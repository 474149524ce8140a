"""In-process event bus: runtime state changes and load progress, fanned out to subscribers.

Subscribers get a bounded queue each; a slow subscriber loses its oldest events (and is told
so) rather than slowing the runtime that publishes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

Event = dict[str, Any]


class EventBus:
    def __init__(self, queue_size: int = 256) -> None:
        self._queue_size = queue_size
        self._subscribers: set[asyncio.Queue[Event]] = set()
        self._callbacks: list[Callable[[Event], None]] = []

    def subscribe_callback(self, callback: Callable[[Event], None]) -> None:
        """Synchronous listeners (metrics) see every event, in order, as it is published."""
        self._callbacks.append(callback)

    def publish(self, kind: str, **fields: Any) -> None:
        event: Event = {"event": kind, "time": time.time(), **fields}
        for callback in self._callbacks:
            callback(event)
        for queue in self._subscribers:
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                    queue.put_nowait({"event": "dropped", "time": event["time"]})
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[Event]]:
        queue: asyncio.Queue[Event] = asyncio.Queue(self._queue_size)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)
