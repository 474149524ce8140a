"""Backend WebUIs (docs/webuis.md): the kinds as data, the catalog (pure), tickets and
sessions, path rules for the backend-UI listener, and the in-memory state the handlers share.
"""

from __future__ import annotations

from router.webuis.catalog import (
    Node,
    catalog,
    compatible,
    lane_for,
    listed,
    loading,
    runtime_lane,
    serving,
    what_to_load,
)
from router.webuis.kinds import BY_ID, KINDS, PREFIX, Kind, Refused, api_path, backend_path
from router.webuis.paths import (
    UiPath,
    parse,
    prefix_of,
    referring_kind,
    rewrite_location,
    unsafe,
)
from router.webuis.state import (
    COOKIE,
    SECURITY_HEADERS,
    TICKET_PARAM,
    Listener,
    WebUIs,
    bridge_cookie,
)
from router.webuis.tickets import SESSION_TTL, TICKET_TTL, TokenStore

__all__ = [
    "BY_ID",
    "COOKIE",
    "KINDS",
    "PREFIX",
    "SECURITY_HEADERS",
    "SESSION_TTL",
    "TICKET_PARAM",
    "TICKET_TTL",
    "Kind",
    "Listener",
    "Node",
    "Refused",
    "TokenStore",
    "UiPath",
    "WebUIs",
    "api_path",
    "backend_path",
    "bridge_cookie",
    "catalog",
    "compatible",
    "lane_for",
    "listed",
    "loading",
    "parse",
    "prefix_of",
    "referring_kind",
    "rewrite_location",
    "runtime_lane",
    "serving",
    "unsafe",
    "what_to_load",
]
