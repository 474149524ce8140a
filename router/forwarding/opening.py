"""Opening one upstream request: the backend's response head, by a deadline (the proxy's
first half; router/forwarding/proxy.py passes the answer on).

- Only connection *establishment* is retried (R30), with a backoff bounded by the connect
  window: a backend still starting refuses connections for a moment.
- A request the backend may have received is never sent twice (R31); the one exception is a
  pooled keep-alive connection the backend closed cleanly as the request went out
  (`closed_keep_alive`), sent once more on another connection, as HTTP clients do.
- For a backend configured with `drain_on_abort`, a client that leaves while the request is
  being opened (during the prefill) leaves the request going on; its answer is drained
  (R23b, router/forwarding/drain.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp

from router.errors import BadGateway, GatewayTimeout
from router.forwarding.drain import AbortDrain, Drains

CONNECT_BACKOFF = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8)
# No socket read timeout: it would also run while a non-streamed answer is computed. Made
# once: a ClientTimeout per request was measurable on the hot path (bench/profile_proxy.py).
HEAD_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)


@dataclass(frozen=True)
class UpstreamRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | AsyncIterator[bytes] | None
    replayable: bool
    # R23b: read the answer to its end if the client leaves (the backend crashes on a cancel).
    abort_drain: AbortDrain | None = None


def closed_keep_alive(exc: aiohttp.ClientError) -> bool:
    """The pooled connection was closed by the backend as the request went out (llama-server
    closes some keep-alive connections after a stream): a clean close before any answer, or
    the body could not be written. A reset (ECONNRESET) is not this: a live backend that read
    the body and reset keeps its 502 (R31). Sent once more on another connection, the way an
    HTTP client retries a request that met a stale keep-alive connection."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return True
    return (
        isinstance(exc, aiohttp.ClientOSError)
        and exc.errno is None
        and ("Can not write request body" in str(exc))
    )


def too_slow(response_timeout: float) -> GatewayTimeout:
    return GatewayTimeout(
        f"the backend did not answer within {response_timeout:g}s (runtime.response_timeout)"
    )


def why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class Opener:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        connect_window: float,
        response_timeout: float,
        drains: Drains,
    ) -> None:
        self._session = session
        self._connect_window = connect_window
        self._response_timeout = response_timeout
        self._drains = drains

    async def head(self, upstream: UpstreamRequest, deadline: float) -> aiohttp.ClientResponse:
        """The backend's response head, by `deadline` (loop time), else the 504."""
        try:
            async with asyncio.timeout_at(deadline):
                return await self._opened(upstream, HEAD_TIMEOUT)
        except TimeoutError:
            raise too_slow(self._response_timeout) from None

    async def _opened(
        self, upstream: UpstreamRequest, client_timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """`open`; for a drained backend, a client leaving during prefill leaves the request
        going on, its answer drained (R23b)."""
        if upstream.abort_drain is None:
            return await self.open(upstream, client_timeout)
        opening = asyncio.ensure_future(self.open(upstream, client_timeout))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            self._drains.start(opening, upstream.abort_drain)
            raise

    async def open(
        self, upstream: UpstreamRequest, client_timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        deadline = time.monotonic() + self._connect_window
        stale_retry = upstream.replayable
        for pause in (*CONNECT_BACKOFF, None):
            try:
                return await self._session.request(
                    upstream.method,
                    upstream.url,
                    headers=upstream.headers,
                    data=upstream.body,
                    timeout=client_timeout,
                    allow_redirects=False,
                    auto_decompress=False,
                )
            except aiohttp.ClientConnectorError as exc:
                if pause is None or not upstream.replayable or time.monotonic() + pause > deadline:
                    raise BadGateway(f"cannot connect to the backend: {why(exc)}") from exc
                await asyncio.sleep(pause)
            except aiohttp.ServerTimeoutError as exc:  # sock_connect: the only socket deadline
                raise GatewayTimeout(f"cannot connect to the backend: {why(exc)}") from exc
            except aiohttp.ClientError as exc:
                # On the last pass there is no next one: the close stands as the answer.
                if stale_retry and pause is not None and closed_keep_alive(exc):
                    stale_retry = False  # aiohttp dropped that connection: the next is another
                    continue
                # The backend may have received the request (reset after reading the body):
                # never resent (R31). A transport error is a 502, not a router bug (500).
                raise BadGateway(f"the backend failed before answering: {why(exc)}") from exc
        raise AssertionError("unreachable")


__all__ = [
    "CONNECT_BACKOFF",
    "HEAD_TIMEOUT",
    "Opener",
    "UpstreamRequest",
    "closed_keep_alive",
    "too_slow",
    "why",
]
