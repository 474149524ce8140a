"""Stream one request to a backend and its response back (DESIGN.md section 5, steps 7-8).

- One pooled aiohttp client session for every backend.
- Bodies stream both ways; SSE/NDJSON are forwarded chunk by chunk as they arrive.
- Only connection *establishment* is retried (R30): a request the backend may have received is
  never sent twice (R31), and nothing is retried after the first byte reached the client (R32).
- A backend that fails mid-stream ends the stream with a terminal error event in the stream's
  own format, so no client hangs or mistakes a cut stream for a finished one (R9, R10).
- A client that goes away cancels the upstream request; it is recorded as 499 (R23).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from router.edge import downstream_response_headers, is_streaming, mark_streaming
from router.errors import BadGateway, GatewayTimeout, RouterError
from router.forwarding.rewrite import ModelRewriter

MAX_REWRITE_BODY = 64 * 1024 * 1024
WHOLE_BODY_MAX = 256 * 1024
CONNECT_BACKOFF = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8)


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
    aborted: bool = False
    error_message: str | None = None
    backend_failed: bool = False
    stream: bool = False
    tail: bytes = field(default=b"", repr=False)  # last bytes, for usage sniffing


@dataclass(frozen=True)
class UpstreamRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | AsyncIterator[bytes] | None
    replayable: bool


class Proxy:
    def __init__(
        self, session: aiohttp.ClientSession, *, idle_timeout: float, connect_window: float
    ) -> None:
        self._session = session
        self._idle_timeout = idle_timeout
        self._connect_window = connect_window

    async def forward(
        self,
        request: web.Request,
        upstream: UpstreamRequest,
        rewriter: ModelRewriter,
        result: ProxyResult,
        overhead_ms: Callable[[], float],
    ) -> web.StreamResponse:
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=10, sock_read=self._idle_timeout or None
        )
        sent_at = time.monotonic()
        resp = await self._open(upstream, timeout)
        try:
            result.upstream_status = resp.status
            result.ttfb_ms = (time.monotonic() - sent_at) * 1000.0
            headers = downstream_response_headers(resp.headers)
            streaming = is_streaming(resp.headers.get("Content-Type"))
            result.stream = streaming
            if streaming:
                mark_streaming(headers)
            if not streaming and _whole(resp, rewriter):
                return await self._whole(resp, headers, rewriter, result, overhead_ms)
            out = web.StreamResponse(status=resp.status, reason=resp.reason, headers=headers)
            if resp.content_length is not None and rewriter.identity:
                out.content_length = resp.content_length
            out.headers["X-Router-Overhead-Ms"] = f"{overhead_ms():.3f}"
            await out.prepare(request)
            result.status = resp.status
            await self._pump(request, resp, out, rewriter, result, streaming)
            return out
        except BaseException:
            resp.close()  # the backend sees the disconnect at once and frees its slot (R23)
            raise
        finally:
            resp.release()

    async def _open(
        self, upstream: UpstreamRequest, client_timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        deadline = time.monotonic() + self._connect_window
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
                    raise BadGateway(f"cannot connect to the backend: {_why(exc)}") from exc
                await asyncio.sleep(pause)
            except aiohttp.ServerTimeoutError as exc:
                raise GatewayTimeout(
                    f"the backend sent nothing for {self._idle_timeout:g}s"
                ) from exc
            except aiohttp.ClientError as exc:
                # The backend may have received the request (reset after reading the body):
                # never resent (R31). A transport error is a 502, not a router bug (500).
                raise BadGateway(f"the backend failed before answering: {_why(exc)}") from exc
        raise AssertionError("unreachable")

    async def _write(self, request: web.Request, out: web.StreamResponse, data: bytes) -> None:
        """Write, with a deadline only when the client is not keeping up (cheap otherwise)."""
        transport = request.transport
        if not self._idle_timeout or transport is None or not transport.get_write_buffer_size():
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
        rewriter: ModelRewriter,
        result: ProxyResult,
        streaming: bool,
    ) -> None:
        stream = rewriter.stream()
        try:
            async for chunk in resp.content.iter_any():
                result.bytes_out += len(chunk)
                data = stream.feed(chunk)
                if data:
                    await self._write(request, out, data)
                    result.tail = (result.tail + data)[-4096:]
            rest = stream.flush()
            if rest:
                await self._write(request, out, rest)
            await out.write_eof()
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
                out, resp, result, f"the backend stopped mid-response: {_why(exc)}"
            )
        except TimeoutError:
            result.backend_failed = True
            await self._end_with_error(
                out, resp, result, f"the backend sent nothing for {self._idle_timeout:g}s"
            )

    async def _end_with_error(
        self,
        out: web.StreamResponse,
        resp: aiohttp.ClientResponse,
        result: ProxyResult,
        message: str,
    ) -> None:
        result.error_message = message
        result.status = 502
        event = terminal_error_event(resp.headers.get("Content-Type", ""), message)
        if event:
            await out.write(event)
        # Without a framing for an error event the connection is closed unfinished, which
        # every HTTP client reports as an incomplete body rather than a short success.
        if event:
            await out.write_eof()
        else:
            request_transport = out._req.transport if out._req else None  # noqa: SLF001
            if request_transport is not None:
                request_transport.close()

    async def _whole(
        self,
        resp: aiohttp.ClientResponse,
        headers: CIMultiDict[str],
        rewriter: ModelRewriter,
        result: ProxyResult,
        overhead_ms: Callable[[], float],
    ) -> web.Response:
        """A small answer in one piece: headers and body leave in one write (bench hot spot),
        and a model ID in a JSON body can be rewritten."""
        try:
            body = await resp.read()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise BadGateway(f"the backend stopped mid-response: {_why(exc)}") from exc
        except TimeoutError as exc:
            result.backend_failed = True
            raise GatewayTimeout(f"the backend sent nothing for {self._idle_timeout:g}s") from exc
        data = rewriter.response_body(body) if _is_json(resp) else body
        result.bytes_out = len(body)
        result.tail = data[-4096:]
        result.status = resp.status
        headers["X-Router-Overhead-Ms"] = f"{overhead_ms():.3f}"
        return web.Response(status=resp.status, reason=resp.reason, headers=headers, body=data)


def terminal_error_event(content_type: str, message: str) -> bytes:
    kind = content_type.split(";", 1)[0].strip().lower()
    error = {"message": message, "type": "upstream_error", "code": 502}
    if kind == "text/event-stream":
        return b"event: error\ndata: " + json.dumps({"error": error}).encode() + b"\n\n"
    if kind in ("application/x-ndjson", "application/jsonl"):
        return json.dumps({"error": message}).encode() + b"\n"
    return b""


def _is_json(resp: aiohttp.ClientResponse) -> bool:
    return "json" in (resp.headers.get("Content-Type") or "").lower()


def _whole(resp: aiohttp.ClientResponse, rewriter: ModelRewriter) -> bool:
    """Read whole: small bodies of known length, and JSON whose model ID must be rewritten."""
    length = resp.content_length
    if length is not None and length <= WHOLE_BODY_MAX:
        return True
    return (
        not rewriter.identity and _is_json(resp) and (length is None or length <= MAX_REWRITE_BODY)
    )


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


__all__ = ["Proxy", "ProxyResult", "UpstreamRequest", "RouterError", "terminal_error_event"]
