"""Cluster base URLs: one normal form, and the allow-list the node client may contact.

The master and its slaves find each other only through configured URLs; a request never names an
address the router would then call (R34). Normalising first means `HTTP://Box:80/` and
`http://box` are the same node, so a registration cannot slip past the allow-list by spelling.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_base_url(url: str) -> str:
    """`scheme://host[:port][/path]` lowercased, default port and trailing slash dropped.

    Raises ValueError naming what is wrong: another scheme, credentials, a query or fragment.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{url!r} must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r} must not carry credentials")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r} must not have a query or fragment")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} has a bad port") from None
    host = parts.hostname.lower().rstrip(".")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        host = f"[{address}]" if address.version == 6 else str(address)
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def listener_url(host: str, port: int) -> str:
    """This router's own listener as a loopback base URL (a wildcard bind is reached on the
    loopback address of its family): the one address outside the cluster's configured URLs
    the node client may call (the master lending to its own model, docs/lending.md)."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class AllowList:
    """The node base URLs this router may call; every other target is refused before connect."""

    def __init__(self, urls: Iterable[str] = ()) -> None:
        self._bases: set[str] = {normalize_base_url(u) for u in urls}

    def add(self, url: str) -> str:
        base = normalize_base_url(url)
        self._bases.add(base)
        return base

    def discard(self, url: str) -> None:
        self._bases.discard(normalize_base_url(url))

    def base_of(self, target: str) -> str | None:
        """The allowed base `target` lies under, or None (a redirect target is checked too)."""
        parts = urlsplit(target.strip())
        try:
            origin = normalize_base_url(f"{parts.scheme}://{parts.netloc}")
        except ValueError:
            return None
        path = parts.path or "/"
        for base in self._bases:
            base_parts = urlsplit(base)
            if f"{base_parts.scheme}://{base_parts.netloc}" != origin:
                continue
            prefix = base_parts.path
            if not prefix or path == prefix or path.startswith(prefix + "/"):
                return base
        return None

    def allows(self, target: str) -> bool:
        return self.base_of(target) is not None

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and normalize_base_url(url) in self._bases

    def __len__(self) -> int:
        return len(self._bases)
