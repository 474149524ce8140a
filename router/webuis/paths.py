"""Paths on the backend-UI listener: which kind a path names, and redirects kept under it.

Pure: no I/O. The listener only serves `/router/webuis/<kind>/...`; a backend's redirect to
its own origin (or to a root path) is rewritten to stay under that prefix, so the browser
never leaves the proxy for the backend's private loopback port.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from router.webuis.kinds import PREFIX, Kind

# Percent-encoded '/', '\', NUL and '.': a separator or traversal the backend might decode.
_BAD_ENCODED = re.compile(r"%(?:2f|5c|00|2e)", re.IGNORECASE)
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class UiPath:
    kind_id: str
    tail: str  # after `/router/webuis/<kind>/`, no leading '/'
    slash: bool  # False: `/router/webuis/<kind>` itself, which redirects to the slash form


def parse(raw_path: str, path: str) -> UiPath | None:
    """The kind and tail of a listener path; None for anything else or anything unsafe
    (`raw_path` is the path as sent, `path` as decoded)."""
    if not path.startswith(PREFIX) or unsafe(raw_path, path):
        return None
    kind_id, slash, tail = path[len(PREFIX) :].partition("/")
    if not kind_id:
        return None
    return UiPath(kind_id, tail, bool(slash))


def unsafe(raw_path: str, path: str) -> bool:
    """'..', '.', NUL, backslash, '//' or a percent-encoded separator in a path."""
    if "\x00" in path or "\\" in path or "//" in path or _BAD_ENCODED.search(raw_path):
        return True
    return any(seg in (".", "..") for seg in path.split("/"))


def referring_kind(referer: str | None, host: str | None) -> str | None:
    """The kind whose page sent a request to the origin's root (its `Referer`, which must
    name this very origin and a path under `/router/webuis/<kind>/`), or None."""
    if not referer or not host:
        return None
    parts = urlsplit(referer)
    if parts.netloc.lower() != host.lower() or parts.scheme not in ("http", "https"):
        return None
    found = parse(parts.path, parts.path)
    return found.kind_id if found is not None and found.slash else None


def prefix_of(kind: Kind) -> str:
    return f"{PREFIX}{kind.id}/"


def rewrite_location(location: str, kind: Kind, backend_port: int) -> str:
    """A backend redirect's target as a path under the kind's prefix.

    Absolute URLs naming the backend's own loopback origin and root paths are mapped back
    the way `kinds.backend_path` maps them forward; relative paths already resolve under the
    prefix; URLs to other origins are left as they are (not the backend's port to hide).
    """
    parts = urlsplit(location)
    if parts.scheme or parts.netloc:
        try:
            port = parts.port
        except ValueError:
            return location
        own = parts.scheme in ("http", "https") and parts.hostname in _LOOPBACK
        if not own or port != backend_port:
            return location
    elif not parts.path.startswith("/") or parts.path.startswith("//"):
        return location
    path = parts.path or "/"
    inner = path[len(kind.ui_path) :] if path.startswith(kind.ui_path) else path[1:]
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return prefix_of(kind) + inner + query + fragment


__all__ = ["UiPath", "parse", "prefix_of", "referring_kind", "rewrite_location", "unsafe"]
