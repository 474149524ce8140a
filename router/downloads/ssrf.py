"""Where a download request may go (S22), and what a redirect keeps. Pure: the addresses a
host resolves to are looked up by the caller (`hub.GuardedTransport`) and passed in.

Public addresses are always allowed. Loopback, private, link-local and the other special
ranges are refused unless `downloads.endpoint` itself is in that class (a mirror on the LAN,
a test hub on 127.0.0.1): the operator chose that network, nothing the hub answers can.
Only `http` and `https` exist; plain `http` only to a loopback address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

MAX_REDIRECTS = 10
_DEFAULT_PORTS = {"http": 80, "https": 443}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int


def origin_of(url: str) -> Origin:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return Origin(scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme, 0))


def address_class(address: IPAddress) -> str:
    """public, loopback, link-local, private or special (multicast, reserved, unspecified)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return "special"
    if address.is_private or (
        isinstance(address, ipaddress.IPv4Address)
        and address in ipaddress.ip_network("100.64.0.0/10")
    ):
        return "private"
    if not address.is_global:
        return "special"
    return "public"


@dataclass(frozen=True)
class Policy:
    """The endpoint's origin and the non-public address classes it opens (its own class)."""

    endpoint: Origin
    allowed: frozenset[str]

    @classmethod
    def for_endpoint(cls, endpoint: str, addresses: Iterable[IPAddress]) -> Policy:
        classes = {address_class(a) for a in addresses} - {"public"}
        return cls(origin_of(endpoint), frozenset(classes))


def refusal(url: str, addresses: Iterable[IPAddress], policy: Policy) -> str | None:
    """Why a request to `url` (resolving to `addresses`) is refused, or None."""
    origin = origin_of(url)
    if origin.scheme not in _DEFAULT_PORTS:
        return f"scheme {origin.scheme or '(none)'!r} is not allowed (http and https only)"
    if not origin.host:
        return "the URL has no host"
    found = list(addresses)
    if not found:
        return f"{origin.host} does not resolve"
    classes = {address_class(a) for a in found}
    blocked = sorted(c for c in classes if c != "public" and c not in policy.allowed)
    if blocked:
        return f"{origin.host} is a {'/'.join(blocked)} address; downloads.endpoint is not"
    if origin.scheme == "http" and classes != {"loopback"}:
        return "plain http is allowed only to a loopback address"
    return None


@dataclass(frozen=True)
class Hop:
    url: str
    keep_authorization: bool


def next_hop(current: str, location: str, endpoint: Origin, hops_done: int) -> Hop:
    """The redirect target; the token goes along only while the target is the endpoint's own
    origin. Raises ValueError past MAX_REDIRECTS or on an empty Location."""
    if hops_done >= MAX_REDIRECTS:
        raise ValueError(f"more than {MAX_REDIRECTS} redirects")
    if not location.strip():
        raise ValueError("a redirect without a Location")
    target = urljoin(current, location.strip())
    return Hop(target, origin_of(target) == endpoint)


def literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
