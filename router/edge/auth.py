"""Credentials -> role, and the per-route role check (the `authenticate` middleware).

Runs after the edge guards (router/edge/guards.py documents the whole order). Credentials are
never forwarded: router/edge/headers.py drops them from every backend request. The policy table is
in docs/security.md; in short: inference routes take inference or admin keys, admin routes
admin keys, `/router/v1/node/...` only the cluster token, and the cluster token nothing else.

Keys are kept only as SHA-256 digests. A presented key is hashed once and compared with every
stored digest through `hmac.compare_digest`, always all of them (the router.yaml keys and the
scoped keys of router/keys both), so neither the time taken nor the code path depends on which
key (if any) matched (S18). A plain hash, not a KDF: keys are
long random tokens, and a KDF per request would cost more than the proxying itself (S19).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Mapping
from typing import Protocol

from aiohttp import web

from router import errors
from router.config import Settings
from router.domain import Role, Surface
from router.edge.caller import attach
from router.edge.guards import ORIGIN_FREE_METHODS, Handler, Middleware, RouteOf
from router.edge.ui_sessions import COOKIE_NAME, CSRF_HEADER, UiSession, UiSessions
from router.keys import KeyBook

# Refused as credentials (they end up in logs and browser history); named in the 401 message.
QUERY_CREDENTIAL_PARAMS = frozenset({"key", "api_key", "apikey", "token", "access_token"})
SHUTDOWN_HANDLER = "control.shutdown"
SHUTDOWN_PATH = "/router/v1/shutdown"
LOGIN_HANDLER = "ui.login"
# The WebUI session that authenticated the request (None: a key, or nothing, did).
UI_SESSION: web.RequestKey[UiSession | None] = web.RequestKey("ui_session", object)  # type: ignore[arg-type]

# Roles whose keys a route of the given role accepts. CLUSTER is deliberately alone.
ACCEPTED: Mapping[Role, frozenset[Role]] = {
    Role.INFERENCE: frozenset({Role.INFERENCE, Role.ADMIN}),
    Role.ADMIN: frozenset({Role.ADMIN}),
    Role.CLUSTER: frozenset({Role.CLUSTER}),
}
_NEEDS = {
    Role.INFERENCE: "an inference or admin key",
    Role.ADMIN: "an admin key",
    Role.CLUSTER: "the cluster token",
}
# Routes a WebUI session opens: it acts as the admin key that made it (never as the cluster).
_SESSION_GRANTS = frozenset({Role.INFERENCE, Role.ADMIN})
# Which role wins is decided by bit position after every comparison has run.
_ROLE_BITS = ((Role.ADMIN, 1), (Role.INFERENCE, 2), (Role.CLUSTER, 4))


class AuthRoute(Protocol):
    """The part of classify.Route authentication reads (plus optional `handler`/`template`)."""

    @property
    def role(self) -> Role: ...
    @property
    def surface(self) -> Surface: ...


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeyRing:
    """The configured credentials, as digests tagged with their role."""

    def __init__(
        self,
        inference: tuple[str, ...] = (),
        admin: tuple[str, ...] = (),
        cluster: tuple[str, ...] = (),
    ) -> None:
        bits = dict(_ROLE_BITS)
        entries: dict[bytes, int] = {}
        for role, keys in (
            (Role.INFERENCE, inference),
            (Role.ADMIN, admin),
            (Role.CLUSTER, cluster),
        ):
            for key in keys:
                if not key:
                    continue
                d = digest(key)
                if d in entries and entries[d] != bits[role]:
                    raise ValueError(
                        "a key may belong to one role only (inference, admin, cluster)"
                    )
                entries[d] = bits[role]
        self._entries = tuple(entries.items())
        self.has_inference = any(b == bits[Role.INFERENCE] for _, b in self._entries)
        self.has_admin = any(b == bits[Role.ADMIN] for _, b in self._entries)
        self.has_cluster = any(b == bits[Role.CLUSTER] for _, b in self._entries)

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        cluster = {t for t in (settings.cluster.token, settings.auth.cluster_token) if t}
        return cls(settings.auth.inference_keys, settings.auth.admin_keys, tuple(cluster))

    def __len__(self) -> int:
        return len(self._entries)

    def role_for(self, presented: str | None) -> Role | None:
        """The role of a presented key, or None. Hashes once; compares with every digest."""
        return self.role_of_digest(digest(presented)) if presented else None

    def role_of_digest(self, probe: bytes) -> Role | None:
        """The role of a presented key's digest, or None; compares with every digest."""
        matched = 0
        for stored, bit in self._entries:
            # Multiply instead of `if`: the loop body is the same for matches and misses.
            matched |= bit * hmac.compare_digest(probe, stored)
        for role, bit in _ROLE_BITS:
            if matched & bit:
                return role
        return None


def presented_credential(headers: Mapping[str, str]) -> str | None:
    """`Authorization: Bearer <k>`, else `X-Api-Key: <k>`; nothing else counts."""
    authorization = headers.get("Authorization", "")
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = headers.get("X-Api-Key", "").strip()
    return key or None


def is_shutdown(route: object) -> bool:
    return (
        getattr(route, "handler", None) == SHUTDOWN_HANDLER
        or getattr(route, "template", None) == SHUTDOWN_PATH
    )


def _missing(request: web.Request) -> errors.Unauthorized:
    challenge = {"WWW-Authenticate": "Bearer"}
    if QUERY_CREDENTIAL_PARAMS & {name.lower() for name in request.query}:
        return errors.Unauthorized(
            "API keys in the URL are not accepted; send Authorization: Bearer <key>",
            headers=challenge,
        )
    return errors.Unauthorized(
        "an API key is required: send Authorization: Bearer <key>", headers=challenge
    )


def _bound_to_loopback(settings: Settings) -> bool:
    host = settings.server.host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Policy:
    """Decides, per request, whether the presented credential may use the route.

    Credentials: a key in a header (always first: a script's Bearer key needs no CSRF token),
    else a live WebUI session cookie, which acts with the admin role; any unsafe request the
    cookie authenticates must carry the session's CSRF token in `X-CSRF-Token`.
    """

    def __init__(
        self,
        keyring: KeyRing,
        settings: Settings,
        sessions: UiSessions | None = None,
        scoped: KeyBook | None = None,
    ) -> None:
        self.keyring = keyring
        self.sessions = sessions
        # Scoped keys (router/keys): inference keys made at run time, loaded from the store.
        self.scoped = scoped if scoped is not None else KeyBook()
        self.trusted_lan = settings.security.profile == "trusted_lan"
        # secure + loopback bind + no API key configured: a single-user machine, keys off.
        # (settings refuse a non-loopback bind in secure without keys; this is the backstop.)
        self.keyless_local = (
            not self.trusted_lan
            and not (keyring.has_inference or keyring.has_admin)
            and _bound_to_loopback(settings)
        )

    @property
    def login_required(self) -> bool:
        """Whether the admin routes need a credential at all (not in trusted_lan, not keyless)."""
        return not (self.trusted_lan or self.keyless_local)

    def session_of(self, request: web.Request) -> UiSession | None:
        """The live session named by the cookie, when no key header is sent; CSRF-checked."""
        if self.sessions is None or "Cookie" not in request.headers:
            return None  # the common case (API clients) costs one header lookup
        if presented_credential(request.headers) is not None:
            return None
        session = self.sessions.lookup(request.cookies.get(COOKIE_NAME))
        if session is None:
            return None
        unsafe = request.method not in ORIGIN_FREE_METHODS
        if unsafe and not session.csrf_ok(request.headers.get(CSRF_HEADER)):
            raise errors.Forbidden(
                f"a request made with the WebUI session must carry its {CSRF_HEADER} header"
            )
        return session

    def check(self, request: web.Request, route: AuthRoute) -> Role | None:
        """The role the request acts with (None when no key was needed); raises 401/403."""
        required = route.role
        if getattr(route, "handler", None) != LOGIN_HANDLER:  # a login makes a new session
            request[UI_SESSION] = session = self.session_of(request)
            if session is not None and self.login_required and required in _SESSION_GRANTS:
                return Role.ADMIN
        if is_shutdown(route) and not self.trusted_lan and not self.keyring.has_admin:
            raise errors.Forbidden(
                "shutdown is disabled: the secure profile allows it only when an admin key "
                "is configured (auth.admin_keys or TENSOR_ROUTER_ADMIN_KEY)"
            )
        if required is Role.PUBLIC:
            return None
        if required is Role.CLUSTER:
            if not self.keyring.has_cluster:
                raise errors.Forbidden(
                    "cluster routes are disabled: no cluster token is configured"
                )
        elif self.trusted_lan or self.keyless_local:
            self._identify(request)  # no key needed; a scoped key sent still names its caller
            return None
        return self._role_of_key(request, required)

    def _identify(self, request: web.Request) -> None:
        credential = presented_credential(request.headers)
        if credential is not None and self.scoped.active:
            key = self.scoped.match(digest(credential))
            if key is not None:
                attach(request, key)

    def _role_of_key(self, request: web.Request, required: Role) -> Role:
        credential = presented_credential(request.headers)
        if credential is None:
            if COOKIE_NAME in request.cookies and required is not Role.CLUSTER:
                raise errors.Unauthorized(
                    "the WebUI session has expired or was ended; sign in again",
                    headers={"WWW-Authenticate": "Bearer"},
                )
            raise _missing(request)
        probe = digest(credential)
        role = self.keyring.role_of_digest(probe)
        # Always run, whatever the key ring said: the time taken names no key set (S18).
        key = self.scoped.match(probe)
        if role is None and key is not None:
            role = Role.INFERENCE
            attach(request, key)
        if role is None:
            raise errors.Unauthorized("Invalid API Key", headers={"WWW-Authenticate": "Bearer"})
        if role not in ACCEPTED[required]:
            raise errors.Forbidden(f"this route needs {_NEEDS[required]}")
        return role


def auth_middleware(
    keyring: KeyRing,
    settings: Settings,
    route_of: RouteOf,
    sessions: UiSessions | None = None,
) -> Middleware:
    """The `authenticate` middleware: a refused request raises 401 / 403 (rendered by the app)."""
    return policy_middleware(Policy(keyring, settings, sessions), route_of)


def policy_middleware(policy: Policy, route_of: RouteOf) -> Middleware:
    """`authenticate` around a Policy the app also hands to the WebUI session handlers."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        policy.check(request, route_of(request))
        return await handler(request)

    return authenticate


def secrets_of(settings: Settings) -> tuple[str, ...]:
    """Every configured credential: blanked out of any message the router renders."""
    keys = (*settings.auth.inference_keys, *settings.auth.admin_keys)
    keys += (settings.downloads.token,) if settings.downloads.token else ()
    return keys + ((settings.cluster.token,) if settings.cluster.token else ())
