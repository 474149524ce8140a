"""Request parameters every handler reads one way: integers from the query, and the node a
site call names (`node_id` in the body or the query, or the repeated `node` filter).

Which node answers is decided before the handler runs: a route's row declares where its call
names a node (`names_node`, router/classify/table.py) and the dispatcher resolves it
(router/api/node/site_relay.py), so a handler reads `addressed_node` (this node's id) and never
meets another node. `node_named` and `node_filter` are the dispatcher's readers (and those of
a handler that keeps a node id as data: routing groups, the fan-out's filters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

from aiohttp import web

from router.errors import BadRequest

# This node's id, set by the dispatcher on a route that declares `names_node`
# (router/classify/table.py) once it found the call names this node (or none): such a handler
# never meets another node.
ADDRESSED: web.RequestKey[str] = web.RequestKey("addressed_node", str)
_NODE_FILTERS = ("node", "node_id")


@overload
def query_int(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int: ...
@overload
def query_int(
    query: Mapping[str, str], name: str, default: None, low: int, high: int
) -> int | None: ...
def query_int(
    query: Mapping[str, str], name: str, default: int | None, low: int, high: int
) -> int | None:
    """An integer query parameter within [low, high]; `default` when absent or empty."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer", param=name) from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}", param=name)
    return value


def refuse_addresses(request: web.Request, body: Mapping[str, Any] | None = None) -> None:
    """R34: a node is named by its id from the registry; an address in a request is refused
    (400), so it never receives anything from this router."""
    if (body is not None and "node_url" in body) or "node_url" in request.query:
        raise BadRequest(
            "name the node by node_id; this router never contacts an address taken from a request",
            param="node_url",
        )


def node_named(request: web.Request, body: Mapping[str, Any] | None = None) -> str:
    """The `node_id` a request names (body first, then query), "" when it names none."""
    refuse_addresses(request, body)
    value: Any = None
    if body is not None and "node_id" in body:
        value = body["node_id"]
    elif "node_id" in request.query:
        value = request.query["node_id"]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest("node_id must be a string", param="node_id")
    return value


def node_filter(request: web.Request) -> list[str]:
    """The repeated `node` / `node_id` query filters of a listing, in order (maybe none)."""
    refuse_addresses(request)
    return [value for name in _NODE_FILTERS for value in request.query.getall(name, [])]


def addressed_node(request: web.Request) -> str:
    """This node's id, for a `names_node` route the dispatcher resolved before the handler."""
    return request[ADDRESSED]
