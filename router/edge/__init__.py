"""The HTTP edge: connection-level guards (listener), the outermost error renderer (errors),
request guards (CIDR, Host, size, Origin), authentication, the hop-by-hop header rules both
legs share, the registry of long-lived sessions shutdown tells to go away, and what every
handler reads from a request the same way: its body (`read_json`, `read_body`), its parameters
(`query_int`, `addressed_node`) and the route table's match (`match_of`).
"""

from __future__ import annotations

from router.edge.auth import secrets_of
from router.edge.bodies import (
    RAW_BODY,
    control_cap,
    parse_json_object,
    read_body,
    read_capped_stream,
    read_json,
)
from router.edge.caller import CALLER
from router.edge.errors import ARRIVED, edge_errors
from router.edge.guards import Handler, Middleware, RouteOf, split_host, surface_of
from router.edge.headers import (
    SSE_HEADERS,
    downstream_response_headers,
    is_streaming,
    mark_streaming,
    upstream_request_headers,
)
from router.edge.params import (
    ADDRESSED,
    addressed_node,
    node_filter,
    node_named,
    query_int,
    refuse_addresses,
)
from router.edge.request import (
    arrived,
    caller_of,
    match_of,
    matched_route,
    may_use,
    scoped_key_of,
)
from router.edge.sessions import Sessions

__all__ = [
    "CALLER",
    "SSE_HEADERS",
    "ARRIVED",
    "RAW_BODY",
    "Handler",
    "Middleware",
    "RouteOf",
    "Sessions",
    "arrived",
    "control_cap",
    "downstream_response_headers",
    "edge_errors",
    "is_streaming",
    "mark_streaming",
    "match_of",
    "may_use",
    "scoped_key_of",
    "caller_of",
    "matched_route",
    "node_filter",
    "node_named",
    "ADDRESSED",
    "addressed_node",
    "parse_json_object",
    "query_int",
    "read_body",
    "read_capped_stream",
    "read_json",
    "refuse_addresses",
    "secrets_of",
    "split_host",
    "surface_of",
    "upstream_request_headers",
]
