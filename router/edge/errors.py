"""The outermost request middleware, `edge_errors`: it stamps the arrival time and is the one
place a `RouterError` raised below becomes a response, in the surface's own shape with keys
blanked out (`errors.render`). Unexpected exceptions become a clean 500. A handler that fails
after its response started is not answered twice: its connection is closed.

The middleware order of the whole app is written down in router/app.py.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from router.config import Settings
from router.edge import announce
from router.edge.auth import secrets_of
from router.edge.guards import Handler, Middleware, RouteOf, surface_of
from router.errors import InternalError, RouterError, render

log = logging.getLogger(__name__)

# When the request arrived (set first thing, read by the handlers' records and relays).
ARRIVED: web.RequestKey[float] = web.RequestKey("arrived", float)


def edge_errors(settings: Settings, route_of: RouteOf) -> Middleware:
    """Middleware 1: the one renderer of errors; `route_of` classifies a request (the app's,
    or the backend-UI listener's), so the error takes the shape of its surface."""
    secrets = secrets_of(settings)

    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[ARRIVED] = time.monotonic()
        try:
            return await handler(request)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            announced = request.get(announce.ANNOUNCED)
            if announced is not None and not isinstance(exc, web.HTTPException):
                # A wait announced on an OpenAI stream: the error goes in-stream instead.
                if not isinstance(exc, RouterError):
                    log.exception("unhandled error on %s %s", request.method, request.path)
                    exc = InternalError("internal error")
                return await announce.fail(announced, exc, secrets)
            if _answer_started(request):
                return _abandon(request, exc)
            if isinstance(exc, web.HTTPException):
                raise  # aiohttp's own answers (e.g. a WebSocket handshake refusal)
            if not isinstance(exc, RouterError):
                log.exception("unhandled error on %s %s", request.method, request.path)
                exc = InternalError("internal error")
            return render(exc, surface_of(request, route_of), secrets)

    return edge


def _answer_started(request: web.Request) -> bool:
    """Has the status line of a response gone out already (a handler prepared its own)?"""
    return request.writer.output_size > 0


def _abandon(request: web.Request, exc: Exception) -> web.StreamResponse:
    """A handler failed after its response started: a second status line written now would land
    inside the open body. Cut the connection, so the client sees the body end abnormally. The
    handler that prepared the response records its own analytics event (one per request)."""
    log.warning(
        "%s %s failed after its response started; closing the connection: %s",
        request.method,
        request.path,
        exc if isinstance(exc, RouterError) else repr(exc),
        exc_info=not isinstance(exc, RouterError | web.HTTPException),
    )
    if request.transport is not None:
        request.transport.close()
    # What aiohttp is handed back; its write meets the closed transport and is dropped.
    return web.Response(status=500)
