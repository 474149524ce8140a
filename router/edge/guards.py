"""Edge guards: who may talk to the router, under which Host, with how much data.

Order (DESIGN.md section 5, outermost first). The connection-level guards run before aiohttp
builds a request, because a middleware only ever sees complete requests:

  0. router/edge/listener.py `GuardedRequestHandler` (one per TCP connection, installed by
     `capped_site`): per-peer and global connection caps with a reserve for the operator ->
     503 and close (S1, S3); header deadline -> 408 and close (S1); request line / header
     field / header count limits -> 414 / 431 / 431 (S4).
  1. `peer_cidr`       the peer address must be in `server.allowed_cidrs`          -> 403
  2. `host_allowlist`  the Host header must name this machine (DNS rebinding, S14) -> 403
  3. `size_caps`       Content-Length above the route's body cap (S5)             -> 413
  4. `origin_rule`     foreign browser Origin on state-changing, origin-strict and
                       WebSocket requests (S15, S16)                                -> 403
  5. `auth.authenticate` (router/edge/auth.py): credential -> role, route's role check.

Middlewares take `route_of(request)`, which classifies the request once and caches the route
on the request. They raise `RouterError`s; the app's outermost `edge_errors` middleware is the
one place those become responses, in the shape `surface_of` picks.
"""

from __future__ import annotations

import functools
import ipaddress
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol
from urllib.parse import urlsplit

import psutil
from aiohttp import web

from router import errors
from router.config import Settings
from router.domain import MiB, Surface

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Methods a cross-site page may send without the Origin rule (plain reads and CORS preflights);
# not classify.SAFE_METHODS, which decides whether a route changes state.
ORIGIN_FREE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_INTERFACE_REFRESH = 10.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


class EdgeRoute(Protocol):
    """The part of classify.Route the edge reads."""

    @property
    def surface(self) -> Surface: ...
    @property
    def state_changing(self) -> bool: ...
    @property
    def origin_strict(self) -> bool: ...


RouteOf = Callable[[web.Request], Any]


def surface_of(request: web.Request, route_of: RouteOf) -> Surface:
    """The error shape for this request: its route's surface, a guess by prefix when the path
    is unknown (Ollama clients only read `{"error": "..."}`)."""
    try:
        surface: Surface = route_of(request).surface
    except errors.MethodNotAllowed as exc:  # a known path: its own API's shape (Kobold's)
        if exc.surface is not None:
            return exc.surface
        return Surface.OLLAMA if request.path.startswith("/api/") else Surface.OPENAI
    except errors.RouterError:
        return Surface.OLLAMA if request.path.startswith("/api/") else Surface.OPENAI
    return surface


# --- 1. peer CIDR -------------------------------------------------------------------------


def peer_allowed(
    remote: str | None, networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]
) -> bool:
    if not remote:
        return False
    try:
        addr = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    # A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; the CIDRs are written as IPv4.
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr in net for net in networks)


def peer_cidr(settings: Settings, route_of: RouteOf) -> Middleware:
    networks = settings.server.networks()

    # Clients are few and come back on every request: parse each address once (bench hot spot).
    @functools.lru_cache(maxsize=4096)
    def allowed(remote: str | None) -> bool:
        return peer_allowed(remote, networks)

    @web.middleware
    async def peer_cidr_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not allowed(request.remote):
            raise errors.Forbidden("your address is not in server.allowed_cidrs")
        return await handler(request)

    return peer_cidr_guard


# --- 2. Host allowlist --------------------------------------------------------------------


def split_host(value: str) -> tuple[str, int | None] | None:
    """`name`, `name:port`, `[v6]:port`, bare `::1` -> (normalized host, port); None if bad."""
    text = value.strip().lower()
    port_text = ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (text[end + 1 :] and not text[end + 1 :].startswith(":")):
            return None
        host, port_text = text[1:end], text[end + 2 :]
    elif text.count(":") > 1:
        host = text
    else:
        host, _, port_text = text.partition(":")
    port: int | None = None
    if port_text or text.endswith(":"):
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        port = int(port_text)
    host = normalize_host(host)
    return (host, port) if host else None


# Every request's Host header goes through here; a client sends the same one each time, and
# parsing it as an address took ~7 us (bench/profile_proxy.py). Bounded: the header is the
# client's to choose.
@functools.lru_cache(maxsize=256)
def normalize_host(host: str) -> str:
    host = host.strip().strip("[]").lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        return host


def interface_addresses() -> list[str]:
    """Every address of this machine's interfaces (link-local scope ids dropped)."""
    return [
        snic.address.split("%", 1)[0]
        for snics in psutil.net_if_addrs().values()
        for snic in snics
        if snic.family.name in ("AF_INET", "AF_INET6")
    ]


class HostAllowlist:
    """The names a browser may use for this router; anything else is a rebinding attempt."""

    def __init__(
        self,
        settings: Settings,
        addresses: Callable[[], Iterable[str]] = interface_addresses,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        bind = normalize_host(settings.server.host)
        self._fixed = set(LOOPBACK_NAMES) | {bind}
        for name in settings.server.allowed_hosts:
            parsed = split_host(name)
            if parsed:
                self._fixed.add(parsed[0])
        self._wildcard = bind in ("", "0.0.0.0", "::")
        self._addresses, self._clock = addresses, clock
        self._dynamic: frozenset[str] = frozenset()
        self._refreshed = float("-inf")
        if self._wildcard:
            self._refresh()

    def _refresh(self) -> None:
        self._dynamic = frozenset(normalize_host(a) for a in self._addresses())
        self._refreshed = self._clock()

    def allows(self, host_header: str | None) -> bool:
        parsed = split_host(host_header) if host_header else None
        if parsed is None:
            return False
        host = parsed[0]
        if host in self._fixed or host in self._dynamic or _is_loopback_ip(host):
            return True
        # Addresses change (DHCP, a new VPN); look again, but not on every bad Host.
        if self._wildcard and self._clock() - self._refreshed > _INTERFACE_REFRESH:
            self._refresh()
            return host in self._dynamic
        return False


def _is_loopback_ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowlist(
    settings: Settings, route_of: RouteOf, allowlist: HostAllowlist | None = None
) -> Middleware:
    hosts = allowlist or HostAllowlist(settings)

    @web.middleware
    async def host_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if not hosts.allows(host):
            raise errors.Forbidden(
                "this Host name is not allowed; add it to server.allowed_hosts"
                if host
                else "the request has no Host header"
            )
        return await handler(request)

    return host_guard


# --- 3. body caps -------------------------------------------------------------------------


def body_cap_for(route: EdgeRoute, settings: Settings) -> int:
    """Largest request body the route takes, in bytes.

    The control cap applies to routes whose body the router parses itself (classify's
    `BodyMode.CONTROL`; routes without a `body` field: the `control` surface).
    """
    body = getattr(route, "body", None)
    if body == "control" if body is not None else route.surface is Surface.CONTROL:
        return int(settings.limits.max_control_body_mb * MiB)
    return int(settings.limits.max_stream_request_gb * 1024 * MiB)


def size_caps(settings: Settings, route_of: RouteOf) -> Middleware:
    @web.middleware
    async def size_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        # The first guard that needs the route classifies; a 404 / 405 from classify goes up
        # to the app's outermost error renderer like any handler error.
        route = route_of(request)
        cap = body_cap_for(route, settings)
        if request.content_length is not None and request.content_length > cap:
            # close: the unread body makes the connection useless for a next request
            raise errors.PayloadTooLarge(f"request body is larger than {cap} bytes", close=True)
        return await handler(request)

    return size_guard


# --- 4. Origin rule -----------------------------------------------------------------------


def same_origin(origin: str, host_header: str | None) -> bool:
    """Does the browser Origin name the host the request was sent to? `null` never does."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or not host_header:
        return False
    try:
        origin_port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    host = split_host(host_header)
    if host is None:
        return False
    # A TLS reverse proxy forwards `Host: name` for `Origin: https://name`: same default port.
    host_port = host[1] or (443 if parts.scheme == "https" else 80)
    return normalize_host(parts.hostname) == host[0] and origin_port == host_port


# An origin the operator trusts on this route (server.cors_origins, router/edge/cors.py).
Trusted = Callable[[web.Request, Any], bool]


def origin_refusal(
    request: web.Request, route: EdgeRoute, trusted: Trusted | None = None
) -> errors.Forbidden | None:
    websocket = request.headers.get("Upgrade", "").lower() == "websocket"
    guarded = (
        route.origin_strict
        or route.state_changing
        or websocket
        or request.method not in ORIGIN_FREE_METHODS
    )
    if not guarded:
        return None  # top-level navigation and plain reads (the WebUI shell) stay open
    origin = request.headers.get("Origin")
    if origin is not None:
        if same_origin(origin, request.headers.get("Host")):
            return None
        if trusted is not None and trusted(request, route):
            return None
        return errors.Forbidden("requests from another site's web page are not allowed")
    if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
        return errors.Forbidden("cross-site requests are not allowed")
    return None


def origin_rule(route_of: RouteOf, trusted: Trusted | None = None) -> Middleware:
    @web.middleware
    async def origin_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        refusal = origin_refusal(request, route_of(request), trusted)
        if refusal is not None:
            raise refusal
        return await handler(request)

    return origin_guard


def edge_middlewares(
    settings: Settings,
    route_of: RouteOf,
    preflight: Middleware | None = None,
    trusted: Trusted | None = None,
) -> list[Middleware]:
    """Middlewares 1-4 of the module docstring, in order (auth comes after them); CORS
    preflights (router/edge/cors.py), when given, are answered after the peer and Host guards."""
    return [
        peer_cidr(settings, route_of),
        host_allowlist(settings, route_of),
        *([preflight] if preflight is not None else []),
        size_caps(settings, route_of),
        origin_rule(route_of, trusted),
    ]
