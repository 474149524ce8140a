"""The router's WebUI state: which kinds are enabled, the tickets and sessions, and where
the backend-UI listener is. In memory on purpose: a restart disables every kind again and
forgets every ticket and session (docs/webuis.md).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass

from router.webuis.tickets import TokenStore, sessions, tickets

TICKET_PARAM = "tensors_router_ticket"
COOKIE = "tensors_router_backend"


def bridge_cookie(kind_id: str) -> str:
    """The same session for a page's calls to the origin's root (Path=/): one name per kind,
    so two open interfaces do not overwrite each other's."""
    return f"{COOKIE}_{kind_id.replace('-', '_')}"


# Response headers on every answer of the backend-UI listener. The pages are the backends'
# own (inline scripts and styles included), so scripts may be inline, but nothing loads or
# connects beyond this origin, and no other page may frame them (clickjacking).
CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; media-src 'self' data: blob:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Pages name themselves to their own origin only (the root-path bridge reads it); the
    # ticket URL is never a referrer: it answers with a redirect.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@dataclass(frozen=True)
class Listener:
    """Where the backend-UI listener runs (set once it is bound)."""

    host: str
    port: int
    public_url: str | None = None

    def origin(self, request_host: str | None, api_host: str) -> str:
        """The origin a browser is sent to: the public URL when configured, else the host
        name the browser used for the management listener (already checked against the Host
        allowlist) when both listeners share an address, else the listener's own address."""
        if self.public_url:
            return self.public_url
        wildcard = self.host in ("", "0.0.0.0", "::")
        host = request_host if request_host and (wildcard or self.host == api_host) else self.host
        return f"http://{_bracketed(host)}:{self.port}"


def _bracketed(host: str) -> str:
    try:
        is_v6 = ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        is_v6 = False
    return f"[{host.strip('[]')}]" if is_v6 else host


class WebUIs:
    def __init__(self, *, require_ticket: bool, clock: Callable[[], float] = time.monotonic):
        # trusted_lan: no credentials anywhere, so a ticket would guard nothing (docs/webuis.md).
        self.require_ticket = require_ticket
        self.enabled: set[str] = set()
        self.tickets: TokenStore = tickets(clock)
        self.sessions: TokenStore = sessions(clock)
        self.listener: Listener | None = None


__all__ = [
    "COOKIE",
    "CSP",
    "SECURITY_HEADERS",
    "TICKET_PARAM",
    "Listener",
    "WebUIs",
    "bridge_cookie",
]
