"""Drain instead of cancel (R23b): read a backend's answer to its end after the client left.

Some backends crash when a generation is cancelled mid-way, taking every other client's
generation with them (an OVMS continuous-batching engine, llama-swap#980). For a program
configured with `drain_on_abort`, a client that goes away does not close the upstream
connection: the answer is read and dropped, bounded by `abort_drain_bytes` and
`abort_drain_timeout`. Past either bound the connection is closed after all: the backend then
sees the cancel it would have seen at once, but a runaway generation never holds the router.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass

import aiohttp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AbortDrain:
    """The bounds of one drain: bytes read after the client left, and seconds."""

    max_bytes: int
    timeout: float


class Drains:
    """The drains in progress; `close()` ends them when the router stops."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[int]] = set()

    def start(self, opened: Awaitable[aiohttp.ClientResponse], bound: AbortDrain) -> None:
        task = asyncio.get_running_loop().create_task(drain(opened, bound))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def drain(opened: Awaitable[aiohttp.ClientResponse], bound: AbortDrain) -> int:
    """Read the answer `opened` yields to its end within `bound`; the bytes read.

    `opened` is the response itself (the client left mid-answer) or the task still opening it
    (the client left during prefill, before the backend's first byte)."""
    resp: aiohttp.ClientResponse | None = None
    got = 0
    try:
        async with asyncio.timeout(bound.timeout):
            resp = await opened
            async for chunk in resp.content.iter_any():
                got += len(chunk)
                if got > bound.max_bytes:
                    log.warning(
                        "abort drain: past %d bytes; closing the backend connection",
                        bound.max_bytes,
                    )
                    resp.close()
                    return got
        resp.release()  # at the end of the answer: the connection goes back to the pool
    except TimeoutError:
        log.warning(
            "abort drain: not done after %gs; closing the backend connection", bound.timeout
        )
        if resp is not None:
            resp.close()
    except asyncio.CancelledError:
        if resp is not None:
            resp.close()
        raise
    except Exception as exc:  # the backend failed on its own; nothing left to protect
        log.info("abort drain ended: %s", exc)
        if resp is not None:
            resp.close()
    return got


__all__ = ["AbortDrain", "Drains", "drain"]
