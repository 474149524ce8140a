"""The listener: connection-level guards that run before aiohttp builds a request.

A middleware only ever sees complete requests, so these live in the per-connection handler
(`GuardedRequestHandler`, installed by `GuardedTCPSite`): connection cap -> 503 and close (S3);
header deadline -> 408 and close (S1); request line / header field / header count limits ->
414 / 431 / 431 (S4). router/edge/guards.py holds the request-level middlewares that follow.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import StreamReader, web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from router import errors
from router.config import Settings
from router.domain import Surface

# Odd on purpose: never equal to the header field limit (a multiple of 1024), which is how a
# parser LineTooLong is told apart as "request line" (414) or "header field" (431).
MAX_URL_BYTES = 16 * 1024 - 1
MAX_HEADERS = 128
# Idle keep-alive connections hold a slot of the connection cap; aiohttp's own default is an hour.
KEEPALIVE_TIMEOUT = 75.0
# How long a refused connection is kept only to read and drop the request it is sending, so the
# kernel does not answer it with a reset that could destroy the 503 before the client reads it.
REJECT_LINGER = 1.0


# --- 0. connection level ------------------------------------------------------------------


def runner_kwargs(settings: Settings) -> dict[str, Any]:
    """Parser limits and keep-alive for `web.AppRunner(app, **runner_kwargs(settings))`."""
    return {
        "max_line_size": MAX_URL_BYTES,
        "max_field_size": settings.limits.max_header_kb * 1024,
        "max_headers": MAX_HEADERS,
        "keepalive_timeout": KEEPALIVE_TIMEOUT,
    }


def _raw_response(err: errors.RouterError) -> bytes:
    """A whole HTTP/1.1 error response, for the places that have no aiohttp request."""
    response = errors.render(err, Surface.OPENAI)
    body = response.body if isinstance(response.body, bytes) else b""
    head = [f"HTTP/1.1 {err.status} {response.reason}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in err.headers.items()]
    head += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(head).encode("latin-1") + body


class ConnectionGuard:
    """State shared by every connection of a listener: the open count and the deadlines."""

    def __init__(self, settings: Settings) -> None:
        self.max_connections = settings.server.max_connections
        self.header_timeout = settings.server.header_timeout
        self.open = 0


def parser_error_status(exc: BaseException) -> tuple[int, str]:
    """aiohttp answers every parser error with 400; name the limit that was hit instead."""
    if isinstance(exc, LineTooLong):
        if exc.args[1] == MAX_URL_BYTES:
            return 414, f"the request line is longer than {MAX_URL_BYTES} bytes"
        return 431, f"a request header is longer than {exc.args[1]} bytes"
    if isinstance(exc, HttpProcessingError) and "Too many headers" in exc.message:
        return 431, f"the request has more than {MAX_HEADERS} headers"
    return 400, "malformed HTTP request"


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection protocol plus the connection cap and the header deadline."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._counted = False
        self._raw: asyncio.Transport | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._between_requests = False
        self._unread: StreamReader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport  # type: ignore[assignment]
        if self._guard.open >= self._guard.max_connections:
            self._reject(transport)  # type: ignore[arg-type]
            return
        self._guard.open += 1
        self._counted = True
        super().connection_made(transport)
        self._arm_head_timer()

    def _reject(self, transport: asyncio.Transport) -> None:
        err = errors.ServiceUnavailable(
            f"{self._guard.max_connections} connections are already open", retry_after=1
        )
        transport.write(_raw_response(err))
        if transport.can_write_eof():
            transport.write_eof()
        self._loop.call_later(REJECT_LINGER, transport.close)

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return  # refused connection: drop what it sends until it goes away
        if self._between_requests and data:
            self._between_requests = False
            self._arm_head_timer()
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._cancel_head_timer()
            self._unread = None

    def eof_received(self) -> None:
        if not self._counted and self._raw is not None:
            self._raw.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_head_timer()
        if not self._counted:
            return
        self._counted = False
        self._guard.open -= 1
        if self._unread is not None:
            self._unread.set_exception(asyncio.CancelledError())
            self._unread = None
        super().connection_lost(exc)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        result = await super().finish_response(request, resp, start_time)
        # The next request's deadline starts at its first byte, not while the client is idle;
        # idle keep-alive connections are closed by keepalive_timeout instead.
        self._between_requests = not self._messages
        # aiohttp now reads and drops an unread body (a 413) for up to lingering_time, and does
        # not notice when the client goes away meanwhile; connection_lost ends that wait.
        self._unread = None if request.content.is_eof() else request.content
        return result

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        if self._guard.header_timeout > 0:
            self._head_timer = self._loop.call_later(
                self._guard.header_timeout, self._head_deadline
            )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_deadline(self) -> None:
        self._head_timer = None
        if self.transport is not None and self._request_count == 0:
            err = errors.RequestTimeout("the request headers did not arrive in time")
            self.transport.write(_raw_response(err))
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status != 400 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # Parser errors are the client's doing: no traceback in the log, no routing.
        self.log_debug("refused a malformed request from %s: %s", request.remote, exc)
        code, text = parser_error_status(exc)
        err = errors.BadRequest(text)
        err.status = code
        response = errors.render(err, Surface.OPENAI)
        response.force_close()
        return response


class GuardedTCPSite(web.TCPSite):
    """A TCPSite whose connections are `GuardedRequestHandler`s sharing one `guard`."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int | None,
        *,
        guard: ConnectionGuard,
        **kwargs: Any,
    ) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.guard = guard

    def _protocol(self) -> GuardedRequestHandler:
        server = self._runner.server
        assert server is not None
        # The same arguments web.Server.__call__ passes to its own RequestHandler.
        return GuardedRequestHandler(server, guard=self.guard, loop=server._loop, **server._kwargs)

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers with the runner; TCPSite.start is replaced
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def capped_site(
    runner: web.BaseRunner,
    settings: Settings,
    host: str | None = None,
    port: int | None = None,
    *,
    guard: ConnectionGuard | None = None,
) -> GuardedTCPSite:
    """The listener for `settings.server.bind` (or host/port) with every connection guard.

    Pass one `guard` to every site of a runner: the connection cap is for the whole router.
    """
    return GuardedTCPSite(
        runner,
        settings.server.host if host is None else host,
        settings.server.port if port is None else port,
        guard=guard or ConnectionGuard(settings),
    )
