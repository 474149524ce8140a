"""The backend-UI listener's one handler: backend WebUIs on their own origin (docs/webuis.md).

A request for `/router/webuis/<kind>/<tail>` passes, in order: the kind exists (404) and its
path has the trailing slash (308); the kind is enabled (404); a ticket in the query is traded
for a session cookie (302 without the ticket), or the cookie names this kind (401; secure
profile only); the kind's allow-list maps the path onto the backend (403); a ready runtime
of the kind is running (503 naming what to load). A page's call to the origin's root (many
UIs build API URLs from `location.origin`) is bridged to the kind its Referer names, for that
kind's API paths only and with its session. Then it is forwarded under a lease, so an
unload waits for it, through the same proxy as every API request (streaming both ways, SSE
as it comes). `on_prepare` puts the security headers on every answer and keeps a backend's
redirects under the kind's prefix.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from aiohttp import web
from multidict import CIMultiDict

from router.appkeys import CATALOG, MAIN_APP, PROXY, RECORDER, RUNTIMES, SETTINGS, WEBUIS
from router.classify import BodyMode
from router.config import Settings
from router.domain import Surface
from router.edge import arrived, caller_of, upstream_request_headers
from router.errors import BadRequest, Forbidden, NotFound, ServiceUnavailable, Unauthorized
from router.inference import forward_to
from router.records import RequestInfo
from router.runtime import RuntimeView
from router.webuis import (
    BY_ID,
    COOKIE,
    PREFIX,
    SECURITY_HEADERS,
    SESSION_TTL,
    TICKET_PARAM,
    Kind,
    Refused,
    WebUIs,
    api_path,
    backend_path,
    bridge_cookie,
    loading,
    parse,
    prefix_of,
    referring_kind,
    rewrite_location,
    runtime_lane,
    serving,
    unsafe,
    what_to_load,
)

ROUTE_TEMPLATE = "/router/webuis/{kind}/{tail}"  # how these requests are recorded
TARGET: web.RequestKey[tuple[Kind, int]] = web.RequestKey("webui_target", tuple)
# Toward the backend: nothing that names the client, its credentials or the router's pages.
_DROP_PREFIXES = ("x-forwarded-", "proxy-")
_DROP = frozenset({"forwarded", "x-real-ip", "origin", "referer", "x-tensors-model"})
# From the backend: the listener answers for cookies, framing rules and CORS itself.
_BACKEND_ONLY = (
    "Set-Cookie", "Content-Security-Policy", "X-Frame-Options", "Access-Control-Allow-Origin",
    "Access-Control-Allow-Credentials", "Access-Control-Allow-Headers",
    "Access-Control-Allow-Methods", "Access-Control-Expose-Headers",
)  # fmt: skip


class ListenerRoute:
    """What the edge guards and the error renderer read for every listener request: errors
    are JSON, bodies stream (the streaming cap), and Origin is checked on unsafe methods."""

    surface = Surface.SITE
    state_changing = False  # per request: the Origin rule guards every non-GET method
    origin_strict = False
    body = BodyMode.STREAM


LISTENER_ROUTE = ListenerRoute()


def listener_route_of(request: web.Request) -> ListenerRoute:
    return LISTENER_ROUTE


def listener_settings(settings: Settings) -> Settings:
    """The settings the listener's edge guards read: its own address in place of the API's
    (the Host allowlist accepts the name it is bound to), and the public URL's host name."""
    host, _ = settings.server.backend_ui_address() or (settings.server.host, 0)
    public = settings.server.backend_ui_public_url
    extra = (urlsplit(public).hostname or "",) if public else ()
    server = settings.server.model_copy(
        update={
            "bind": f"[{host}]:0" if ":" in host else f"{host}:0",
            "allowed_hosts": settings.server.allowed_hosts + tuple(h for h in extra if h),
        }
    )
    return settings.model_copy(update={"server": server})


async def share_resources(app: web.Application) -> None:
    """on_startup: the listener serves with the management app's resources (started first)."""
    main = app[MAIN_APP]
    app[SETTINGS], app[CATALOG], app[RUNTIMES] = main[SETTINGS], main[CATALOG], main[RUNTIMES]
    app[PROXY], app[RECORDER], app[WEBUIS] = main[PROXY], main[RECORDER], main[WEBUIS]


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    target = request.get(TARGET)
    if target is not None:  # the backend's answer
        for name in _BACKEND_ONLY:
            response.headers.popall(name, None)
        location = response.headers.get("Location")
        if location:
            response.headers["Location"] = rewrite_location(location, *target)
    response.headers.update(SECURITY_HEADERS)


async def serve(request: web.Request) -> web.StreamResponse:
    raw_path = request.raw_path.split("?", 1)[0]
    if not request.path.startswith(PREFIX):
        return await _bridge(request, raw_path)
    ui = parse(raw_path, request.path)
    kind = BY_ID.get(ui.kind_id) if ui is not None else None
    if ui is None or kind is None:
        raise NotFound("no backend WebUI here; open one from the admin WebUI")
    if not ui.slash:
        query = request.rel_url.raw_query_string
        return _redirect(prefix_of(kind) + (f"?{query}" if query else ""), status=308)
    state = request.app[WEBUIS]
    _check_enabled(kind, state)
    if TICKET_PARAM in request.query:
        return _exchange(request, kind, state)
    _check_session(request, kind, state, COOKIE)
    try:
        path = backend_path(kind, ui.tail, request.method)
    except Refused as exc:
        raise Forbidden(str(exc)) from None
    return await _forward(request, kind, path)


async def _bridge(request: web.Request, raw_path: str) -> web.StreamResponse:
    """A page's call to the origin's root (`fetch("/api/v1/generate")`, a form posting to
    `/v1/audio/transcriptions`): the kind is the one its Referer names, only that kind's API
    paths pass, and its session must come along (the Path=/ twin of the page cookie)."""
    kind_id = referring_kind(request.headers.get("Referer"), request.host)
    kind = BY_ID.get(kind_id or "")
    if kind is None or unsafe(raw_path, request.path):
        raise NotFound("no backend WebUI here; open one from the admin WebUI")
    state = request.app[WEBUIS]
    _check_enabled(kind, state)
    _check_session(request, kind, state, bridge_cookie(kind.id))
    try:
        path = api_path(kind, request.path, request.method)
    except Refused as exc:
        raise Forbidden(str(exc)) from None
    return await _forward(request, kind, path)


def _check_enabled(kind: Kind, state: WebUIs) -> None:
    if kind.id not in state.enabled:
        raise NotFound("webui is not enabled (POST /router/v1/site/webuis/session)")


def _check_session(request: web.Request, kind: Kind, state: WebUIs, cookie: str) -> None:
    if state.require_ticket and not state.sessions.check(request.cookies.get(cookie), kind.id):
        raise Unauthorized(
            f"no {kind.id} session: open the interface from the admin WebUI "
            "(sessions last 15 minutes and are kept per interface)"
        )


def _redirect(location: str, *, status: int = 302) -> web.Response:
    return web.Response(status=status, headers={"Location": location, "Cache-Control": "no-store"})


def _exchange(request: web.Request, kind: Kind, state: WebUIs) -> web.Response:
    """A ticket for a session cookie, once; then the same page without the ticket."""
    if request.method != "GET":
        raise BadRequest(f"{TICKET_PARAM} is accepted on GET only", param=TICKET_PARAM)
    valid = state.tickets.check(request.query.get(TICKET_PARAM), kind.id)
    if state.require_ticket and not valid:
        raise Unauthorized(
            "this ticket is not valid: it was used already, expired after a minute, or "
            "opens another interface; open the interface again from the admin WebUI"
        )
    rest = request.rel_url.with_query(
        [(k, v) for k, v in request.query.items() if k != TICKET_PARAM]
    )
    response = _redirect(str(rest))
    if valid:
        https = (state.listener.public_url or "").startswith("https:") if state.listener else False
        session = state.sessions.issue(kind.id)
        for name, path in ((COOKIE, prefix_of(kind)), (bridge_cookie(kind.id), "/")):
            response.set_cookie(
                name,
                session,
                path=path,
                max_age=int(SESSION_TTL),
                httponly=True,
                samesite="Strict",
                secure=https,
            )
    return response


async def _forward(request: web.Request, kind: Kind, path: str) -> web.StreamResponse:
    manager = request.app[RUNTIMES]
    views = manager.views()
    view = serving(kind, views)
    if view is None:
        raise _not_running(request, kind, views)
    lane = runtime_lane(kind, view)
    assert lane is not None  # serving() chose it for this lane
    # No await between the view read above and ensure(): the runtime seen ready and not
    # draining is the one leased (it may queue behind busy work; it never loads another).
    lease = await manager.ensure(view.config, lane, caller=caller_of(request))
    try:
        runtime = lease.runtime
        request[TARGET] = (kind, runtime.port)
        info = RequestInfo(ROUTE_TEMPLATE, "webui", lane.value, arrived(request), time.time())
        info.model, info.queue_wait_ms = view.config.id, lease.queue_wait_ms
        query = request.rel_url.raw_query_string
        body = request.content.iter_any() if request.can_read_body else None
        return await forward_to(
            request,
            runtime,
            path + (f"?{query}" if query else ""),
            body,
            info,
            headers=upstream_headers(request.headers),
        )
    finally:
        lease.release()


def _not_running(request: web.Request, kind: Kind, views: tuple[RuntimeView, ...]) -> Exception:
    pending = loading(kind, views)
    if pending is not None:
        return ServiceUnavailable(
            f"{pending.config.id} is still loading for {kind.id}; try again shortly",
            retry_after=2,
        )
    configs = request.app[CATALOG].configs()
    return ServiceUnavailable(f"no {kind.id} runtime is running; {what_to_load(kind, configs)}")


def upstream_headers(incoming: Mapping[str, str]) -> CIMultiDict[str]:
    drop = {n for n in incoming if n.lower().startswith(_DROP_PREFIXES) or n.lower() in _DROP}
    return upstream_request_headers(incoming, extra_drop=drop)


__all__ = [
    "LISTENER_ROUTE",
    "listener_route_of",
    "listener_settings",
    "on_prepare",
    "serve",
    "share_resources",
    "upstream_headers",
]
