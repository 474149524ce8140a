"""Which headers cross the proxy, in each direction.

Hop-by-hop headers (RFC 9110 section 7.6.1) describe one connection, never the next one; the
client's credentials are the router's and are never forwarded to a backend.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

from multidict import CIMultiDict, CIMultiDictProxy

HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
    )
)

CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "cookie"})

# The router sets these itself on the way to the backend.
# aiohttp inflates gzip request bodies itself (and caps count inflated bytes, S7), so the
# backend gets the plain body and must not be told it is still encoded.
_REQUEST_DROP = (
    HOP_BY_HOP | CREDENTIAL_HEADERS | {"host", "content-length", "expect", "content-encoding"}
)
# Backends' own CORS and framing never reach the client; the router answers for itself.
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "server", "date"}

STREAMING_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl")
# The router's own server-sent event streams (waits, downloads, setup jobs, the event feed):
# never cached, and passed on event by event by a buffering proxy (nginx).
SSE_HEADERS: Mapping[str, str] = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


def _connection_tokens(headers: Mapping[str, str]) -> set[str]:
    """Headers named in `Connection:` are hop-by-hop too."""
    value = headers.get("Connection", "")
    return {token.strip().lower() for token in value.split(",") if token.strip()}


@functools.lru_cache(maxsize=8)
def _request_drop(extra: tuple[str, ...]) -> frozenset[str]:
    """The request's drop set with a caller's own names (a handful of fixed tuples): made once
    each instead of on every request."""
    return _REQUEST_DROP | {h.lower() for h in extra}


def _with_connection_tokens(
    drop: frozenset[str], headers: CIMultiDictProxy[str] | Mapping[str, str]
) -> frozenset[str]:
    tokens = _connection_tokens(headers)
    return drop | tokens if tokens - drop else drop


def upstream_request_headers(
    incoming: CIMultiDictProxy[str] | Mapping[str, str], extra_drop: Iterable[str] = ()
) -> CIMultiDict[str]:
    drop = _with_connection_tokens(_request_drop(tuple(extra_drop)), incoming)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in incoming.items():
        if name.lower() not in drop:
            out.add(name, value)
    return out


def downstream_response_headers(upstream: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    drop = _with_connection_tokens(_RESPONSE_DROP, upstream)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        if name.lower() not in drop:
            out.add(name, value)
    return out


def is_streaming(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() in STREAMING_TYPES


def mark_streaming(headers: CIMultiDict[str]) -> None:
    """Tell every buffering hop in front of us (nginx, CDNs) to pass events at once."""
    headers["X-Accel-Buffering"] = "no"
    headers["Cache-Control"] = "no-cache"
