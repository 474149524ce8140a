"""In-process event bus: runtime state changes and load progress, fanned out to subscribers.

Every published event gets an `id`, increasing by one per event for the life of the router
process, so a client can tell what it missed. Subscribers get a bounded queue each. A
subscriber that falls a whole queue behind (a slow browser tab) has its backlog dropped and
finds one `resync` event in its place: it must fetch a fresh snapshot. Publishing never waits,
so a slow subscriber can neither slow the runtime that publishes nor the other subscribers.
The event types and their fields are listed in docs/events.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

Event = dict[str, Any]
# Adds fields to an event before anyone sees it (e.g. the usual load time of a model).
Enricher = Callable[[Event], Mapping[str, Any] | None]
RESYNC = "resync"


class Subscription:
    """One subscriber's bounded backlog; `get()` waits for the next event."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: deque[Event] = deque()
        self._ready = asyncio.Event()
        self.resyncs = 0  # how often this subscriber fell a whole queue behind

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def offer(self, event: Event, last_id: int) -> None:
        if len(self._items) >= self._size:
            # Everything up to the previous event is lost: say so, then go on from this one.
            self._items.clear()
            self.resyncs += 1
            reason = "the subscriber fell behind; its backlog was dropped"
            self._items.append(resync_event(last_id - 1, reason))
        self._items.append(event)
        self._ready.set()

    def get_nowait(self) -> Event:
        if not self._items:
            raise asyncio.QueueEmpty
        event = self._items.popleft()
        if not self._items:
            self._ready.clear()
        return event

    async def get(self) -> Event:
        while not self._items:
            await self._ready.wait()
        return self.get_nowait()


def resync_event(last_id: int, reason: str) -> Event:
    """Tells a client its view is stale: fetch the snapshot, then apply events after `id`."""
    return {"event": RESYNC, "id": last_id, "time": time.time(), "reason": reason}


class EventBus:
    def __init__(self, queue_size: int = 256) -> None:
        self._queue_size = queue_size
        self._subscribers: set[Subscription] = set()
        self._callbacks: list[Callable[[Event], None]] = []
        self._enrichers: list[Enricher] = []
        self._ids = itertools.count(1)
        self.last_id = 0

    def subscribe_callback(self, callback: Callable[[Event], None]) -> None:
        """Synchronous listeners (metrics) see every event, in order, as it is published."""
        self._callbacks.append(callback)

    def add_enricher(self, enricher: Enricher) -> None:
        self._enrichers.append(enricher)

    def publish(self, kind: str, **fields: Any) -> Event:
        self.last_id = next(self._ids)
        event: Event = {"event": kind, "id": self.last_id, "time": time.time(), **fields}
        for enricher in self._enrichers:
            extra = enricher(event)
            if extra:
                event.update(extra)
        for callback in self._callbacks:
            callback(event)
        for subscription in self._subscribers:
            subscription.offer(event, self.last_id)
        return event

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Subscription]:
        subscription = Subscription(self._queue_size)
        self._subscribers.add(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)
