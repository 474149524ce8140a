"""S24's check, shared by the fake and the real tier: a backend process listens on loopback
only, and a connection to its port through this machine's other addresses is refused."""

from __future__ import annotations

import ipaddress
import socket

import psutil


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of `pid` and its descendants."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return sorted(
        (c.laddr.ip, c.laddr.port)
        for p in procs
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    )


def other_addresses() -> list[str]:
    """This machine's addresses that are not loopback (unspecified and link-local left out)."""
    found = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = ipaddress.ip_address(a.address.split("%")[0])
            if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
                found.append(str(ip))
    return found


def refused(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect((address, port))
        except ConnectionRefusedError:
            return True
        except OSError:
            return True  # unreachable counts as not served
        return False


def assert_loopback_only(pid: int) -> list[int]:
    """The backend's listening ports; fails when one is bound beyond loopback or answers a
    connection through a non-loopback address."""
    sockets = listening(pid)
    assert sockets, f"pid {pid} listens nowhere"
    beyond = [(ip, port) for ip, port in sockets if not ipaddress.ip_address(ip).is_loopback]
    assert beyond == [], f"listening beyond loopback: {beyond}"
    ports = sorted({port for _, port in sockets})
    for address in other_addresses():
        for port in ports:
            assert refused(address, port), f"{address}:{port} accepted a connection"
    return ports
