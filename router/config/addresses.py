"""Addresses in settings: `HOST:PORT` binds, host names, IP networks, browser origins and the
download hub's endpoint. Pure checks: each returns the canonical form or raises ValueError.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


def _canonical_cidr(value: str) -> str:
    # Host bits are forgiven (192.168.1.5/24 means the /24); the stored form is canonical.
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP network like 192.168.1.0/24") from None


def _host_name(value: str) -> str:
    if not _HOSTNAME.match(value) and not is_ip(value.strip("[]")):
        raise ValueError(f"{value!r} is not a host name or IP address (no scheme, no port)")
    return value.lower()


Cidr = Annotated[str, AfterValidator(_canonical_cidr)]
HostName = Annotated[str, AfterValidator(_host_name)]


def hub_endpoint(value: str) -> str:
    """A download hub's base URL, without a trailing slash."""
    # https anywhere; plain http only to a loopback mirror (a test hub, a local cache).
    parts = urlsplit(value.strip())
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"{value!r} must be an http(s) URL like https://huggingface.co")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{value!r}: no credentials, query or fragment in the endpoint")
    loopback = host == "localhost" or (is_ip(host) and ipaddress.ip_address(host).is_loopback)
    if parts.scheme == "http" and not loopback:
        raise ValueError(f"{value!r}: plain http is allowed only on a loopback address")
    return value.strip().rstrip("/")


def origin_only(value: str) -> str:
    """An http(s) origin and nothing more (no user info, path, query or fragment)."""
    parts = urlsplit(value.strip())
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"{value!r} has a bad port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} must be an http:// or https:// origin")
    if parts.username or parts.password or parts.path not in ("", "/"):
        raise ValueError(f"{value!r} must be an origin only: no user info or path")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r} must be an origin only: no query or fragment")
    return f"{parts.scheme}://{parts.netloc}"


def cors_origin(value: str) -> str:
    """A browser origin as browsers serialize it in `Origin`: lower case, default port left
    out, no trailing slash (so an exact comparison with the header is right)."""
    origin = origin_only(value)
    parts = urlsplit(origin)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}[parts.scheme]
    port = f":{parts.port}" if parts.port not in (None, default) else ""
    return f"{parts.scheme}://{host.lower()}{port}"


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def split_bind(bind: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:8080`) -> (host without brackets, port); ValueError if bad."""
    host, sep, port = bind.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bind {bind!r} must be HOST:PORT with a port from 0 to 65535")
    if host.startswith("[") and host.endswith("]"):
        if ":" not in host or not is_ip(host[1:-1]):
            raise ValueError(f"bind {bind!r}: {host} is not an IPv6 address")
        return host[1:-1], int(port)
    if ":" in host:
        raise ValueError(f"bind {bind!r}: write an IPv6 address in brackets, like [::1]:8080")
    if not _HOSTNAME.match(host):
        raise ValueError(f"bind {bind!r}: {host!r} is not a host name or IPv4 address")
    return host, int(port)


__all__ = ["Cidr", "HostName", "cors_origin", "hub_endpoint", "is_ip", "origin_only", "split_bind"]
