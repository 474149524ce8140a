"""The connection caps: how many connections a router, and one peer address, may hold open.

A pure decision with its counts, no I/O: the listener (router/edge/listener.py) asks it whether
to admit each new connection and writes the refusal itself.

The caps (docs/security.md, "Connection caps"): one peer address holds at most
`server.max_connections_per_peer` connections, so one misbehaving client cannot fill the
listener (S1); the last `server.reserved_connections` slots of `server.max_connections` are
kept for peers in `server.reserved_cidrs` (the operator on loopback), so /health, unload and
shutdown stay reachable when the rest are taken (S3).
"""

from __future__ import annotations

from collections import Counter

from router import errors
from router.config import Settings
from router.edge.guards import peer_allowed


class ConnectionGuard:
    """State shared by every connection of a router: open counts (total and per peer address)
    and the header deadline."""

    def __init__(self, settings: Settings) -> None:
        server = settings.server
        self.max_connections = server.max_connections
        self.max_per_peer = server.max_connections_per_peer
        self.reserved = min(server.reserved_connections, server.max_connections - 1)
        self.header_timeout = server.header_timeout
        self._reserved_for = server.reserved_networks()
        # A slave's master relays every client's work over its own connections: one peer
        # address, which the per-peer cap would throttle to 64 requests (docs/cluster.md).
        self.cluster_peers: frozenset[str] = frozenset()
        self.open = 0
        self.by_peer: Counter[str] = Counter()

    def is_reserved_peer(self, peer: str) -> bool:
        return peer_allowed(peer, self._reserved_for)

    def refusal(self, peer: str) -> errors.ServiceUnavailable | None:
        """Why a new connection from `peer` is refused, or None to admit it."""
        if self.by_peer[peer] >= self.max_per_peer and peer not in self.cluster_peers:
            return errors.ServiceUnavailable(
                f"your address already has {self.max_per_peer} connections open "
                "(server.max_connections_per_peer)",
                retry_after=1,
            )
        limit = self.max_connections
        if not self.is_reserved_peer(peer):
            limit -= self.reserved
        if self.open >= limit:
            return errors.ServiceUnavailable(
                f"{self.open} connections are already open (server.max_connections)",
                retry_after=1,
            )
        return None

    def admit(self, peer: str) -> None:
        self.open += 1
        self.by_peer[peer] += 1

    def release(self, peer: str) -> None:
        self.open -= 1
        self.by_peer[peer] -= 1
        if self.by_peer[peer] <= 0:
            del self.by_peer[peer]  # peers come and go: the counter must not grow
