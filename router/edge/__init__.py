"""The HTTP edge: connection-level guards (listener), the outermost error renderer (errors),
request guards (CIDR, Host, size, Origin), authentication, the hop-by-hop header rules both
legs share, and the registry of long-lived sessions shutdown tells to go away.
"""

from __future__ import annotations

from router.edge.auth import secrets_of
from router.edge.bodies import read_capped_stream
from router.edge.errors import ARRIVED, edge_errors
from router.edge.guards import Middleware, RouteOf, split_host, surface_of
from router.edge.headers import (
    downstream_response_headers,
    is_streaming,
    mark_streaming,
    upstream_request_headers,
)
from router.edge.sessions import Sessions

__all__ = [
    "ARRIVED",
    "Middleware",
    "RouteOf",
    "Sessions",
    "downstream_response_headers",
    "edge_errors",
    "is_streaming",
    "mark_streaming",
    "read_capped_stream",
    "secrets_of",
    "split_host",
    "surface_of",
    "upstream_request_headers",
]
