"""Every request in flight, and the work requests leave running: what the graceful stop waits
for (R27).

One registry per router. The edge middleware enters every request (served here, relayed to
another node, lent, translated, a realtime socket, an event stream); ComfyUI jobs enter while
they run. The stop (router/server.py) waits for the registry to empty, an event rather than a
poll, up to `runtime.drain_timeout`. What is still running then is cancelled with
`DRAIN_DEADLINE`, and a stream that knows its own framing catches that cancellation and ends
with its terminal error event instead of being cut (the proxy: SSE or NDJSON by `Reply.fail`;
event streams: `ended_at_deadline`).

Leases alone did not cover it: a request relayed to a slave holds none on the master, so a
master's SIGTERM cut every relayed stream half a second in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from aiohttp import web

from router.errors import ServiceUnavailable

DRAIN_DEADLINE = "the router is stopping and the drain deadline (runtime.drain_timeout) passed"
# The terminal event of the router's own event streams (SSE) at the deadline.
DRAIN_EVENT = (
    b"event: error\ndata: "
    + json.dumps(
        {"error": {"message": DRAIN_DEADLINE, "type": "unavailable_error", "code": 503}}
    ).encode()
    + b"\n\n"
)
# After the deadline's cancellations, how long the ending streams get to write their last event.
ENDING_GRACE = 1.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class InFlight:
    """The tasks of requests and jobs in flight; `drain()` waits for none to be left."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._empty = asyncio.Event()
        self._empty.set()
        self.closing = False  # the stop began: new requests are refused
        self.past_deadline = False  # the drain deadline passed: what runs is being ended

    def __len__(self) -> int:
        return len(self._tasks)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The current task counts until the block ends."""
        task = asyncio.current_task()
        assert task is not None
        self._add(task)
        try:
            yield
        finally:
            self._discard(task)

    def hold_task(self, task: asyncio.Task[Any]) -> None:
        """`task` (background work a request started) counts until it is done."""
        self._add(task)
        task.add_done_callback(self._discard)

    def _add(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        self._empty.clear()

    def _discard(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._empty.set()

    async def drain(self, deadline: float) -> bool:
        """Wait up to `deadline` seconds for every request and job to end; then cancel the rest with
        `DRAIN_DEADLINE` and give them `ENDING_GRACE` to write their terminal events.
        True when everything ended by itself."""
        self.closing = True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(deadline):
                await self._empty.wait()
                return True
        self.past_deadline = True
        for task in list(self._tasks):
            task.cancel(DRAIN_DEADLINE)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ENDING_GRACE):
                await self._empty.wait()
        return False

    def ending(self) -> bool:
        """In an `except CancelledError`: whether this cancellation is the drain deadline's;
        if so it is taken back, so the caller can write its terminal event and return."""
        task = asyncio.current_task()
        if not self.past_deadline or task is None:
            return False
        task.uncancel()
        return True


def inflight_middleware(registry: InFlight) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if registry.closing:  # a keep-alive connection's next request, during the drain
            raise ServiceUnavailable("the router is stopping", retry_after=1)
        with registry.held():
            return await handler(request)

    return middleware


@contextlib.asynccontextmanager
async def ended_at_deadline(
    registry: InFlight, response: web.StreamResponse, terminal: bytes = DRAIN_EVENT
) -> AsyncIterator[None]:
    """A prepared stream whose loop runs inside: at the drain deadline it ends with `terminal`
    (an event in its own framing) and a proper end of body, not a cut connection."""
    try:
        yield
    except asyncio.CancelledError:
        if not registry.ending():
            raise
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write(terminal)
            await response.write_eof()


__all__ = [
    "DRAIN_DEADLINE",
    "DRAIN_EVENT",
    "ENDING_GRACE",
    "InFlight",
    "ended_at_deadline",
    "inflight_middleware",
]
