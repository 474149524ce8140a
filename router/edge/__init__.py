"""The HTTP edge: connection-level guards (listener), request guards (CIDR, Host, size,
Origin), authentication, and the hop-by-hop header rules both legs share.
"""

from __future__ import annotations

from router.edge.guards import Middleware, RouteOf, surface_of
from router.edge.headers import (
    downstream_response_headers,
    is_streaming,
    mark_streaming,
    upstream_request_headers,
)

__all__ = [
    "Middleware",
    "RouteOf",
    "downstream_response_headers",
    "is_streaming",
    "mark_streaming",
    "surface_of",
    "upstream_request_headers",
]
