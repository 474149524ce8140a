"""Which TCP ports listen on this machine, read from /proc/net/tcp{,6} without touching them:
a test bind or connect could race the RPC server's own bind or, worse, become its one client
(it serves one connection at a time)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

_LISTEN = "0A"
_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _address(hex_host: str) -> str:
    raw = bytes.fromhex(hex_host)
    # The kernel prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def listening() -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket of this network namespace."""
    found: set[tuple[str, int]] = set()
    for table in _TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _LISTEN:
                continue
            host, port = fields[1].split(":")
            found.add((_address(host), int(port, 16)))
    return found


def open_ports(low: int, high: int) -> list[tuple[str, int]]:
    """Listening sockets whose port is in [low, high]: what the range exposes now."""
    return sorted((h, p) for h, p in listening() if low <= p <= high)


def free_port(low: int, high: int, taken: set[int]) -> int | None:
    """The first port of [low, high] nothing listens on (any address) and not in `taken`."""
    busy = {port for _, port in listening()} | taken
    return next((port for port in range(low, high + 1) if port not in busy), None)


__all__ = ["free_port", "listening", "open_ports"]
