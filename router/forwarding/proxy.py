"""Stream one request to a backend and its response back (DESIGN.md section 5, steps 7-8).

- One pooled aiohttp client session for every backend; the request is opened by
  router/forwarding/opening.py (connect retries R30, never a resend of a request the backend
  may have received R31, the head's deadline).
- Bodies stream both ways; SSE/NDJSON are forwarded chunk by chunk as they arrive; nothing is
  retried after the first byte reached the client (R32).
- A backend that fails mid-stream ends the stream with a terminal error event in the stream's
  own format, so no client hangs or mistakes a cut stream for a finished one (R9, R10). One
  that ends the stream with its own error event is recorded as failed too (stream_end.py).
- A client that goes away cancels the upstream request; it is recorded as 499 (R23). For a
  backend configured with `drain_on_abort` the answer is read to its end instead, bounded
  (R23b, router/forwarding/drain.py).
- Deadlines that fit the work (R24): the answer's headers, and a whole answer's body, are
  waited for up to `runtime.response_timeout` (a non-streamed generation arrives only when it
  is done, and a backend that dies meanwhile closes the connection: 502 at once);
  `runtime.stream_idle_timeout` applies between the bytes of a streamed answer.
- What reaches the client is the caller's `Translation` (router/forwarding/reply.py): the
  backend's answer with model IDs rewritten, or another API's shape (Ollama); every upstream
  call goes through here, so each gets the points above.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from router.edge import downstream_response_headers, mark_streaming, read_capped_stream
from router.edge.announce import ANNOUNCED
from router.edge.inflight import DRAIN_DEADLINE, InFlight
from router.errors import BadGateway
from router.forwarding.drain import Drains
from router.forwarding.opening import Opener, UpstreamRequest, too_slow, why
from router.forwarding.reply import MAX_WHOLE_READ, Reply, Translation
from router.forwarding.stream_end import stream_error

TAIL_BYTES = 4096  # the last bytes of an answer, kept for the usage report
WRITE_EWMA = 0.1  # weight of the newest whole answer in the running write-cost estimate


class ClientStalled(Exception):
    """The client stopped reading a response for longer than the send deadline."""


@dataclass
class ProxyResult:
    """What the analytics event needs to know about one forwarded request."""

    status: int = 0
    upstream_status: int | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    ttfb_ms: float | None = None
    # A streamed answer's first body bytes written to the client, in ms from sending (traces).
    first_chunk_ms: float | None = None
    sent_at: float = 0.0  # time.monotonic() when the request went to the backend
    aborted: bool = False
    error_message: str | None = None
    backend_failed: bool = False
    stream: bool = False
    # Sent on to another cluster node, which records the event itself
    # (router/inference/relay.py).
    relayed: bool = False
    tail: bytes = field(default=b"", repr=False)  # last bytes, for usage sniffing


class Proxy:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        idle_timeout: float,
        response_timeout: float,
        connect_window: float,
        inflight: InFlight | None = None,
    ) -> None:
        # (not `or`: an empty registry is falsy)
        self._inflight = inflight if inflight is not None else InFlight()
        self._idle_timeout = idle_timeout
        self._response_timeout = response_timeout
        # What follows the overhead header of a whole answer (serializing and writing it) cannot
        # be in that header; it is measured on each answer and the running mean added instead
        # (docs/decisions.md, "X-Router-Overhead-Ms").
        self._write_ms = 0.0
        self._drains = Drains()
        self.opener = Opener(
            session,
            connect_window=connect_window,
            response_timeout=response_timeout,
            drains=self._drains,
        )

    @property
    def draining(self) -> int:
        """Answers being read after their client left (R23b)."""
        return len(self._drains)

    async def close(self) -> None:
        """End the drains still running (R23b); the router is stopping."""
        await self._drains.close()

    async def forward(
        self,
        request: web.Request,
        upstream: UpstreamRequest,
        translation: Translation,
        result: ProxyResult,
        overhead_ms: Callable[[], float],
    ) -> web.StreamResponse:
        result.sent_at = sent_at = time.monotonic()
        deadline = asyncio.get_running_loop().time() + self._response_timeout
        resp = await self.opener.head(upstream, deadline)
        kept = False
        try:
            result.upstream_status = resp.status
            result.ttfb_ms = (time.monotonic() - sent_at) * 1000.0
            reply = translation.reply(
                resp.status, resp.headers.get("Content-Type", ""), resp.content_length
            )
            result.stream = reply.streaming
            announced: web.StreamResponse | None = request.get(ANNOUNCED)
            if announced is not None:  # started while the request waited (edge/announce.py)
                await self._into_announced(request, resp, announced, reply, result)
                return announced
            if reply.whole:
                return await self._answer_whole(
                    request, resp, _headers(resp, reply), reply, result, overhead_ms, deadline
                )
            return await self._stream(request, resp, reply, result, overhead_ms)
        except BaseException as exc:
            if upstream.abort_drain is not None and _client_left(exc):
                self._drains.start(_ready(resp), upstream.abort_drain)  # R23b
                kept = True
            else:
                resp.close()  # the backend sees the disconnect at once and frees its slot (R23)
            raise
        finally:
            if not kept:
                resp.release()

    async def _stream(
        self,
        request: web.Request,
        resp: aiohttp.ClientResponse,
        reply: Reply,
        result: ProxyResult,
        overhead_ms: Callable[[], float],
    ) -> web.StreamResponse:
        """The backend's answer passed on as it arrives (the status line goes out first)."""
        headers = _headers(resp, reply)
        out = web.StreamResponse(status=reply.status, reason=_reason(resp, reply), headers=headers)
        if resp.content_length is not None and reply.same_length:
            out.content_length = resp.content_length
        out.headers["X-Router-Overhead-Ms"] = f"{overhead_ms():.3f}"
        await out.prepare(request)
        result.status = reply.status
        await self._pump(request, resp, out, reply, result)
        return out

    async def _into_announced(
        self,
        request: web.Request,
        resp: aiohttp.ClientResponse,
        out: web.StreamResponse,
        reply: Reply,
        result: ProxyResult,
    ) -> None:
        """The backend's stream into an answer already started: its status line is sent, so
        a refusal becomes an error (the edge writes it as an in-stream error event)."""
        if resp.status != 200 or not reply.streaming:
            # The whole (capped) body: read(n) returns only what is buffered, and may be empty.
            raw = await _read_capped(resp)
            detail = raw.decode("utf-8", "replace").strip()[:4096] or resp.reason or ""
            raise BadGateway(f"the backend answered {resp.status}: {detail}")
        result.status = 200
        await self._pump(request, resp, out, reply, result)

    async def _write(self, request: web.Request, out: web.StreamResponse, data: bytes) -> None:
        """Write, with a deadline whenever the write could wait for the client (cheap when it
        cannot: the client keeps up and the piece is small)."""
        transport = request.transport
        if not self._idle_timeout or transport is None or not _may_wait(transport, data):
            await out.write(data)
            return
        try:
            async with asyncio.timeout(self._idle_timeout):
                await out.write(data)
        except TimeoutError:
            raise ClientStalled(
                f"the client read nothing for {self._idle_timeout:g}s (runtime.stream_idle_timeout)"
            ) from None

    async def _pump(
        self,
        request: web.Request,
        resp: aiohttp.ClientResponse,
        out: web.StreamResponse,
        reply: Reply,
        result: ProxyResult,
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            # The idle deadline runs only while waiting for the backend, never during a write
            # to the client (which has its own deadline, ClientStalled).
            async with asyncio.timeout(None) as idle:
                while True:
                    idle.reschedule(loop.time() + self._idle_timeout)
                    chunk = await resp.content.readany()
                    idle.reschedule(None)
                    if not chunk:
                        break
                    result.bytes_out += len(chunk)
                    await self._send(request, out, result, reply.body.feed(chunk))
            await self._send(request, out, result, reply.body.flush())
            await out.write_eof()
            _note_stream_error(out, result)
        except ClientStalled as exc:
            # The client stopped reading (R22): free the backend slot rather than hold it open.
            result.aborted, result.status, result.error_message = True, 499, str(exc)
            if request.transport is not None:
                request.transport.close()
            resp.close()
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
        ) as exc:
            await self._end_with_error(
                request, out, reply, result, f"the backend stopped mid-response: {why(exc)}"
            )
        except TimeoutError:
            result.backend_failed = True
            await self._end_with_error(
                request, out, reply, result, f"the backend sent nothing for {self._idle_timeout:g}s"
            )
        except asyncio.CancelledError:
            # The graceful stop's deadline (R27): the stream ends in its own format, not cut.
            if not self._inflight.ending():
                raise
            resp.close()
            await self._end_with_error(request, out, reply, result, DRAIN_DEADLINE)

    async def _send(
        self, request: web.Request, out: web.StreamResponse, result: ProxyResult, data: bytes
    ) -> None:
        if data:
            await self._write(request, out, data)
            if result.first_chunk_ms is None:
                result.first_chunk_ms = (time.monotonic() - result.sent_at) * 1000.0
            result.tail = (result.tail + data)[-TAIL_BYTES:]

    async def _end_with_error(
        self,
        request: web.Request,
        out: web.StreamResponse,
        reply: Reply,
        result: ProxyResult,
        message: str,
    ) -> None:
        result.error_message = message
        result.status = 502
        event = reply.fail(message)
        if event is None:
            # Without a framing for an error event the connection is closed unfinished, which
            # every HTTP client reports as an incomplete body rather than a short success.
            if request.transport is not None:
                request.transport.close()
            return
        if event:
            await out.write(event)
        await out.write_eof()

    async def _answer_whole(
        self,
        request: web.Request,
        resp: aiohttp.ClientResponse,
        headers: CIMultiDict[str],
        reply: Reply,
        result: ProxyResult,
        overhead_ms: Callable[[], float],
        deadline: float,
    ) -> web.Response:
        """The answer in one piece: headers and body leave in one write (bench hot spot), and
        a body that can only be rewritten or translated whole is.

        Written here rather than by aiohttp after the handler returns: the recording, the lease
        release and the middlewares' unwinding then run while the client already reads, instead
        of in front of its answer (bench/RESULTS.md, real backend)."""
        try:
            async with asyncio.timeout_at(deadline):
                body = await _read_capped(resp)
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
        ) as exc:
            raise BadGateway(f"the backend stopped mid-response: {why(exc)}") from exc
        except TimeoutError:
            raise too_slow(self._response_timeout) from None
        result.bytes_out = len(body)
        data = reply.body.feed(body) + reply.body.flush()
        result.tail = data[-TAIL_BYTES:]
        result.status = reply.status
        stamped = time.monotonic()
        headers["X-Router-Overhead-Ms"] = f"{overhead_ms() + self._write_ms:.3f}"
        out = web.Response(
            status=reply.status, reason=_reason(resp, reply), headers=headers, body=data
        )
        try:
            await out.prepare(request)
            await out.write_eof()
        except ConnectionResetError:  # the client left; aiohttp's own writer would not raise
            result.aborted, result.status = True, 499
            return out
        spent = (time.monotonic() - stamped) * 1000.0
        self._write_ms += WRITE_EWMA * (spent - self._write_ms)
        return out


async def _read_capped(resp: aiohttp.ClientResponse) -> bytes:
    too_large = BadGateway(
        f"the backend's answer is larger than {MAX_WHOLE_READ} bytes and cannot be rewritten"
    )
    return await read_capped_stream(resp.content, resp.content_length, MAX_WHOLE_READ, too_large)


def _may_wait(transport: asyncio.Transport, data: bytes) -> bool:
    """Whether writing `data` can pause the connection until the client reads.

    A write pauses once the transport's buffer passes its high-water mark. An empty buffer
    alone does not rule that out: a large piece (the backend's bytes pile up while the router
    waits on a slow client) can pass the mark in one write, and that wait had no deadline.
    """
    buffered = transport.get_write_buffer_size()
    return bool(buffered) or len(data) > transport.get_write_buffer_limits()[1] // 2


def _headers(resp: aiohttp.ClientResponse, reply: Reply) -> CIMultiDict[str]:
    headers = downstream_response_headers(resp.headers)
    if reply.content_type is not None:
        headers.popall("Content-Encoding", None)
        headers["Content-Type"] = reply.content_type
    if reply.streaming:
        mark_streaming(headers)
    return headers


def _reason(resp: aiohttp.ClientResponse, reply: Reply) -> str | None:
    # The backend's reason phrase only for its own status; aiohttp words any other.
    return resp.reason if reply.status == resp.status else None


def _note_stream_error(out: web.StreamResponse, result: ProxyResult) -> None:
    """A stream the backend ended with an error event instead of the answer's end: the client
    got that error, so the analytics record a failure (502, as for a stream cut mid-answer)
    with the backend's message, not the 200 its status line said."""
    message = stream_error(out.content_type, result.tail)
    if message is not None:
        result.status, result.error_message = 502, message


def _client_left(exc: BaseException) -> bool:
    return isinstance(exc, asyncio.CancelledError | ConnectionResetError)


async def _ready(resp: aiohttp.ClientResponse) -> aiohttp.ClientResponse:
    return resp


__all__ = ["ClientStalled", "Proxy", "ProxyResult", "UpstreamRequest"]
