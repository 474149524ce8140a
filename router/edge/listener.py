"""The listener: connection-level guards that run before aiohttp builds a request.

A middleware only ever sees complete requests, so these live in the per-connection handler
(`GuardedRequestHandler`, installed by `GuardedTCPSite`): connection caps -> 503 and close (S1,
S3); header deadline -> 408 and close (S1); body deadline -> 408 and close (S2, S5); request
line / header field / header count limits -> 414 / 431 / 431 (S4). router/edge/guards.py holds
the request-level middlewares that follow.

The body deadline lives here, below every way a handler reads a body (`request.read()`,
`.post()`, `.multipart()`, `request.content`, the body readers of router/edge/bodies.py): a body
gets `server.header_timeout` from its headers plus one second per `BODY_MIN_RATE` bytes that
arrived (Apache's mod_reqtimeout rule: a trickle or a `Content-Length` longer than what is sent
runs out, a large upload at any real speed does not). Time the router itself holds the client
back (reading paused while a handler waits) does not count. At the deadline the body's reader
fails with `RequestTimeout`, which the handler's read raises and the edge renders as 408 in the
route's own shape; the connection is closed after that answer.

The caps (S1, S3) are counted and decided by `ConnectionGuard` (router/edge/connection_caps.py);
this module admits or refuses each connection by its answer.

These refusals happen where no aiohttp request (and so no middleware) exists: they are written
as raw bytes, by `_refuse` only, always in the OpenAI shape (the path is not known yet).
"""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any, cast

from aiohttp import StreamReader, web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from router import errors
from router.config import Settings
from router.domain import Surface
from router.edge.connection_caps import ConnectionGuard

# Odd on purpose: never equal to the header field limit (a multiple of 1024), which is how a
# parser LineTooLong is told apart as "request line" (414) or "header field" (431).
MAX_URL_BYTES = 16 * 1024 - 1
MAX_HEADERS = 128
# Idle keep-alive connections hold a slot of the connection cap; aiohttp's own default is an hour.
KEEPALIVE_TIMEOUT = 75.0
# How long a refused connection is kept only to read and drop the request it is sending, so the
# kernel does not answer it with a reset that could destroy the 503 before the client reads it.
REJECT_LINGER = 1.0
# A body's deadline grows by one second for every this many bytes received (mod_reqtimeout's
# default MinRate): only a client slower than this on average can run out of time.
BODY_MIN_RATE = 500.0


# --- 0. connection level ------------------------------------------------------------------


def runner_kwargs(settings: Settings) -> dict[str, Any]:
    """Parser limits and keep-alive for `web.AppRunner(app, **runner_kwargs(settings))`."""
    return {
        "max_line_size": MAX_URL_BYTES,
        "max_field_size": settings.limits.max_header_kb * 1024,
        "max_headers": MAX_HEADERS,
        "keepalive_timeout": KEEPALIVE_TIMEOUT,
    }


def _refuse(transport: asyncio.Transport, err: errors.RouterError) -> None:
    """Write a whole HTTP/1.1 error response on a connection that has no aiohttp request."""
    body = json.dumps(errors.error_body(err, Surface.OPENAI)).encode()
    head = [f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}"]
    head += ["Content-Type: application/json", *(f"{k}: {v}" for k, v in err.headers.items())]
    head += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    # No isinstance check: uvloop's transports do not derive from asyncio's classes.
    if not transport.is_closing():
        transport.write("\r\n".join(head).encode("latin-1") + body)


def _peer_of(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def parser_error(exc: BaseException) -> errors.RouterError:
    """aiohttp answers every parser error with 400; name the limit that was hit instead."""
    if isinstance(exc, LineTooLong):
        if exc.args[1] == MAX_URL_BYTES:
            return errors.URITooLong(f"the request line is longer than {MAX_URL_BYTES} bytes")
        return errors.HeadersTooLarge(f"a request header is longer than {exc.args[1]} bytes")
    if isinstance(exc, HttpProcessingError) and "Too many headers" in exc.message:
        return errors.HeadersTooLarge(f"the request has more than {MAX_HEADERS} headers")
    return errors.BadRequest("malformed HTTP request")


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection protocol plus the connection cap and the header deadline."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._counted = False
        self._peer = ""
        self._raw: asyncio.Transport | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._between_requests = False
        self._unread: StreamReader | None = None
        self._body: StreamReader | None = None  # the body being received, while incomplete
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_since = 0.0  # when the body's time budget started
        self._body_base = 0  # bytes the body had then
        self._body_timed_out = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP server's transports are stream transports (asyncio's or uvloop's).
        self._raw = raw = cast(asyncio.Transport, transport)
        self._peer = _peer_of(transport)
        refusal = self._guard.refusal(self._peer)
        if refusal is not None:
            self._reject(raw, refusal)
            return
        self._guard.admit(self._peer)
        self._counted = True
        super().connection_made(transport)
        self._arm_head_timer()

    def _reject(self, transport: asyncio.Transport, err: errors.RouterError) -> None:
        _refuse(transport, err)
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
            self._watch_body()
            self._fail_open_body()

    def _fail_open_body(self) -> None:
        """A framing error inside a body (a bad chunk extension, S8) is queued by aiohttp as
        the next message, while the request being served waits for the rest of its body until
        a deadline. Fail that body now: its handler answers 400 in its surface's shape."""
        current = self._current_request
        if current is None or current.content.is_eof() or not self._messages:
            return
        error = self._messages[-1][0]
        if isinstance(error, _ErrInfo):
            current.content.set_exception(
                errors.BadRequest(f"malformed request body framing: {error.message}")
            )

    def eof_received(self) -> None:
        if not self._counted and self._raw is not None:
            self._raw.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_head_timer()
        self._stop_body_timer()
        if not self._counted:
            return
        self._counted = False
        self._guard.release(self._peer)
        if self._unread is not None:
            self._unread.set_exception(asyncio.CancelledError())
            self._unread = None
        super().connection_lost(exc)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        result = await super().finish_response(request, resp, start_time)
        if self._body is request.content:
            self._stop_body_timer()  # answered: what is left of the body is aiohttp's to drop
        if self._body_timed_out or (resp.status == 408 and not request.content.is_eof()):
            # Answered (408, or whatever the handler said before reading): the rest of that
            # body never comes, so neither aiohttp's lingering nor keep-alive would end.
            self._close_after_answer()
            return result
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
            _refuse(
                self.transport, errors.RequestTimeout("the request headers did not arrive in time")
            )
            self._close_after_answer()
            return
        self.force_close()

    def _close_after_answer(self) -> None:
        """End a connection whose client may still be sending (a 408 mid-body or mid-headers).

        Closing a socket with unread bytes makes the kernel send a reset instead of a FIN,
        and a reset can destroy the answer before the client reads it (RFC 9112 section 9.6):
        a trickling client then sees "connection reset" instead of its 408. So half-close
        after the answer, drop what still arrives, and close when the client does or after
        REJECT_LINGER, as a refused connection is (`_reject`).
        """
        transport = self.transport
        if transport is None:
            self.force_close()
            return
        # aiohttp's force_close would close the transport now: detach it first, so only the
        # request loop ends (data_received drops input once _force_close is set).
        self.transport = None
        self.force_close()
        if not transport.is_reading():  # paused for a full buffer: drain the socket anyway
            transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
        self._loop.call_later(REJECT_LINGER, transport.close)

    # --- the body deadline (S2, S5) ---

    def _watch_body(self) -> None:
        # A pipelined batch ends with the one message whose body may still be arriving.
        payload = self._messages[-1][1] if self._messages else None
        if (
            payload is None
            or not isinstance(payload, StreamReader)
            or payload.is_eof()
            or self._guard.header_timeout <= 0
        ):
            return
        self._stop_body_timer()
        self._body = payload
        self._body_since, self._body_base = self._loop.time(), payload.total_bytes
        self._body_timer = self._loop.call_later(self._guard.header_timeout, self._body_check)

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._body = None

    def _body_check(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof() or body.exception() is not None:
            self._body = None
            return
        now = self._loop.time()
        if self._reading_paused or self._buffer_paused:
            # The router holds the client back: its budget starts again when reading resumes.
            self._body_since, self._body_base = now, body.total_bytes
            self._body_timer = self._loop.call_later(self._guard.header_timeout, self._body_check)
            return
        arrived = body.total_bytes - self._body_base
        deadline = self._body_since + self._guard.header_timeout + arrived / BODY_MIN_RATE
        if now < deadline:
            self._body_timer = self._loop.call_at(deadline, self._body_check)
            return
        self._body, self._body_timed_out = None, True
        body.set_exception(
            errors.RequestTimeout(
                f"the request body did not arrive in time ({self._guard.header_timeout:g}s "
                f"plus 1s per {BODY_MIN_RATE:g} bytes, server.header_timeout)"
            )
        )

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
        if self.transport is not None:
            _refuse(self.transport, parser_error(exc))
        self.force_close()
        # Already answered: aiohttp's attempt to write this one meets the closed transport
        # and ends the connection quietly.
        return web.Response(status=400)


class GuardedTCPSite(web.TCPSite):
    """A TCPSite whose connections are `GuardedRequestHandler`s sharing one `guard`.

    Uses aiohttp internals: `web.Server._loop` and `._kwargs` (to build the protocol as
    `Server.__call__` does), `BaseSite._runner`, and TCPSite's private address fields (it sets
    `_bound_port`, which `TCPSite.port` reads), and it replaces `TCPSite.start` to hand the
    event loop its own protocol factory. aiohttp's major
    version is bounded in pyproject.toml for that reason. Drop when aiohttp lets a runner or
    site take a request-handler class or protocol factory (there is no such parameter in 3.14;
    `web.Server` always builds a plain `RequestHandler`).
    """

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
        # TCPSite.port (and so .name, the logged address) reads this private field, which the
        # replaced TCPSite.start would have set: it is the only way to learn a port-0 bind.
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
        # aiohttp's default accept queue (128) overflows when many clients connect at once
        # (S1's 500 attackers reconnecting): the kernel then drops handshakes, and a
        # legitimate client waits out SYN-ACK retransmissions for seconds. Queue as many as
        # the router would admit (the kernel caps it at net.core.somaxconn).
        backlog=settings.server.max_connections,
    )
