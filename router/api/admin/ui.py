"""`/router/v1/ui/session`: the admin WebUI's sign-in, its state, and sign-out.

The route is public (the edge checks nothing but CIDR, Host and Origin), because it is where a
browser without a credential learns that it must sign in. Signing in takes an admin key and
answers with an HttpOnly, SameSite=Strict cookie scoped to `/router/` and the session's CSRF
token in the body; the `authenticate` middleware (router/edge/auth.py) then treats the cookie
as the admin role and asks every unsafe request made with it for that token. An inference key
is refused (403): it never opens the WebUI or a site API.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from router import __version__
from router.appkeys import AUTH, SETTINGS, UI_LOGINS
from router.domain import Role
from router.edge import Handler, read_json
from router.edge.auth import UI_SESSION
from router.edge.ui_sessions import COOKIE_NAME, COOKIE_PATH, UiSession
from router.errors import BadRequest, Forbidden, TooManyRequests, Unauthorized

_NO_STORE = {"Cache-Control": "no-store"}


def _state(request: web.Request, session: UiSession | None) -> dict[str, Any]:
    settings = request.app[SETTINGS]
    policy = request.app[AUTH]
    profile = settings.security.profile
    return {
        "authenticated": session is not None or not policy.login_required,
        "login_required": policy.login_required,
        "profile": profile,
        "csrf_token": session.csrf_token if session else None,
        "expires_at": session.expires_at if session else None,
        # The trace viewer a stored trace id links to (observability.trace_url), or None.
        "trace_url": settings.observability.trace_url,
        "node": {
            "node_id": settings.cluster.node_id,
            "version": __version__,
            "bind": settings.server.bind,
            "profile": profile,
        },
    }


async def session_state(request: web.Request) -> web.StreamResponse:
    return web.json_response(_state(request, request.get(UI_SESSION)), headers=_NO_STORE)


async def login(request: web.Request) -> web.StreamResponse:
    policy = request.app[AUTH]
    body = await read_json(request, required=True)
    key = body.get("key")
    if not isinstance(key, str) or not key:
        raise BadRequest('"key" must be a non-empty string (an admin key)', param="key")
    if not policy.login_required:
        # Nothing to sign in to: this profile opens the admin routes without a credential.
        return web.json_response(_state(request, None), headers=_NO_STORE)
    limiter = request.app[UI_LOGINS]
    wait = limiter.retry_after(request.remote)
    if wait > 0:
        raise TooManyRequests(
            "too many failed sign-ins from this address; try again later",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )
    role = policy.keyring.role_for(key)
    if role is None:
        limiter.failed(request.remote)
        raise Unauthorized("Invalid API Key")
    if role is not Role.ADMIN or policy.sessions is None:
        raise Forbidden("the WebUI needs an admin key; an inference key does not open it")
    token, session = policy.sessions.create()
    response = web.json_response(_state(request, session), headers=_NO_STORE)
    response.set_cookie(
        COOKIE_NAME,
        token,
        path=COOKIE_PATH,
        max_age=int(policy.sessions.ttl),
        httponly=True,
        samesite="Strict",
        secure=request.app[SETTINGS].ui.cookie_secure or None,
    )
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    # The middleware already refused an unsafe request with a live cookie and no CSRF token.
    policy = request.app[AUTH]
    if policy.sessions is not None:
        policy.sessions.end(request.cookies.get(COOKIE_NAME))
    response = web.Response(status=204, headers=_NO_STORE)
    response.del_cookie(COOKIE_NAME, path=COOKIE_PATH)
    return response


HANDLERS: dict[str, Handler] = {
    "ui.session": session_state,
    "ui.login": login,
    "ui.logout": logout,
}
