"""CORS for the model APIs (`server.cors_origins`; docs/security.md, "Browser origins").

The operator lists the web origins whose pages may call the inference routes (as
`OLLAMA_ORIGINS` does for Ollama). For those origins, and only on routes whose role is
`inference`:
- a preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is answered 204
  with the route's methods and the asked headers (`Authorization` always among them), without
  credentials, as browsers send preflights;
- every answer, errors included, carries `Access-Control-Allow-Origin` and `Vary: Origin`, and
  exposes the router's own answer headers a page may want to read (`EXPOSED_HEADERS`: how long
  it queued, when to retry), which browsers hide from scripts unless listed;
- the Origin rule (router/edge/guards.py) lets the origin through.
Control, site, node and WebUI routes never answer CORS, and an unlisted foreign origin stays
refused. The middleware sits after the peer and Host guards, so a refused peer gets no answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from router import errors
from router.domain import Role
from router.edge import queue_wait
from router.edge.guards import Handler, Middleware

PREFLIGHT_MAX_AGE = 600
ALWAYS_ALLOWED_HEADERS = ("Authorization", "Content-Type")
EXPOSED_HEADERS = (queue_wait.HEADER, "Retry-After")
# The route a request with this method would reach (raises RouterError when none would).
RouteFor = Callable[[str, str], Any]


class CorsPolicy:
    """Which origins are trusted; `*` trusts every one (allowed only with keys, load.py)."""

    def __init__(self, origins: tuple[str, ...]) -> None:
        self._any = "*" in origins
        self._origins = frozenset(o for o in origins if o != "*")

    @property
    def enabled(self) -> bool:
        return self._any or bool(self._origins)

    def allows(self, origin: str | None) -> bool:
        if origin is None or origin == "null":
            return False
        return self._any or origin.strip().lower().rstrip("/") in self._origins

    def trusted(self, request: web.Request, route: object) -> bool:
        """A listed origin on an inference route (the Origin rule lets it through)."""
        inference = getattr(route, "role", None) is Role.INFERENCE
        return inference and self.allows(request.headers.get("Origin"))


def allowed_headers(requested: str | None) -> str:
    """The headers a preflight allows: those the page asked for, and always Authorization."""
    names = [h.strip() for h in (requested or "").split(",") if h.strip()]
    seen = {h.lower() for h in names}
    names += [h for h in ALWAYS_ALLOWED_HEADERS if h.lower() not in seen]
    return ", ".join(names)


def preflight_answer(origin: str, methods: frozenset[str], requested: str | None) -> web.Response:
    headers = {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": ", ".join(sorted(methods)),
        "Access-Control-Allow-Headers": allowed_headers(requested),
        "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE),
        "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
    }
    return web.Response(status=204, headers=headers)


def cors_preflight(policy: CorsPolicy, route_for: RouteFor) -> Middleware:
    @web.middleware
    async def cors_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        wanted = request.headers.get("Access-Control-Request-Method")
        if request.method != "OPTIONS" or wanted is None or not policy.allows(origin):
            return await handler(request)
        try:
            route = route_for(wanted.strip().upper(), request.path)
        except errors.RouterError:
            return await handler(request)  # no such route for that method: as without CORS
        if getattr(route, "role", None) is not Role.INFERENCE:
            return await handler(request)
        assert origin is not None
        return preflight_answer(
            origin, route.allowed, request.headers.get("Access-Control-Request-Headers")
        )

    return cors_guard


def add_allow_origin(policy: CorsPolicy, route_of: Callable[[web.Request], Any]) -> Any:
    """An `on_response_prepare` hook: the CORS headers on every answer to a listed origin's
    request on an inference route (errors from the guards and handlers included)."""

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if not policy.allows(origin) or "Access-Control-Allow-Origin" in response.headers:
            return
        try:
            route = route_of(request)
        except errors.RouterError:
            return
        if getattr(route, "role", None) is not Role.INFERENCE:
            return
        assert origin is not None
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = ", ".join(EXPOSED_HEADERS)
        response.headers.add("Vary", "Origin")

    return on_prepare
