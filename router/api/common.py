"""Small helpers shared by the handlers: the matched route, JSON bodies, model resolution."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from aiohttp import web

from router.appkeys import ARRIVED, CATALOG, CLUSTER, MATCH, RAW_BODY, SETTINGS
from router.classify import Match, Route
from router.cluster import RemoteNode
from router.config import ModelConfig
from router.domain import MiB
from router.edge import read_capped_stream
from router.errors import BadRequest, ModelNotFound, NotFound, PayloadTooLarge, UnsupportedMediaType

_CONTROL_TYPES = frozenset({"application/json", "application/octet-stream", "text/plain", ""})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def match_of(request: web.Request) -> Match:
    return request[MATCH]


def matched_route(request: web.Request) -> Route:
    return match_of(request).route


def arrived(request: web.Request) -> float:
    """When the edge saw the request (monotonic); now for requests built outside the edge."""
    return request.get(ARRIVED) or time.monotonic()


async def read_capped(request: web.Request, cap: int, setting: str) -> bytes:
    """The whole body, refused with 413 once it passes `cap` bytes (kept on the request)."""
    too_large = PayloadTooLarge(f"the body is larger than {cap} bytes ({setting})")
    raw = await read_capped_stream(request.content, request.content_length, cap, too_large)
    request[RAW_BODY] = raw
    return raw


def parse_json_object(raw: bytes, *, required: bool = False) -> dict[str, Any]:
    """A JSON object from a body held in full; an empty body is `{}` unless `required`."""
    if not raw.strip():
        if required:
            raise BadRequest("a JSON body is required")
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


async def read_json_object(
    request: web.Request,
    cap: int | None = None,
    setting: str = "limits.max_control_body_mb",
    *,
    required: bool = False,
) -> tuple[bytes, dict[str, Any]]:
    """The raw body and its JSON object; `cap` defaults to limits.max_control_body_mb."""
    if cap is None:
        cap = int(request.app[SETTINGS].limits.max_control_body_mb * MiB)
    raw = await read_capped(request, cap, setting)
    return raw, parse_json_object(raw, required=required)


async def read_control_json(request: web.Request, *, required: bool = False) -> dict[str, Any]:
    """A small JSON object the router parses itself (control and site routes)."""
    cap = int(request.app[SETTINGS].limits.max_control_body_mb * MiB)
    raw = await read_capped(request, cap, "limits.max_control_body_mb")
    if raw.strip() and request.content_type not in _CONTROL_TYPES:
        raise UnsupportedMediaType("send the body as application/json")
    return parse_json_object(raw, required=required)


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


def node_of(request: web.Request, body: Mapping[str, Any] | None = None) -> str:
    """The `node_id` asked for (body first, then query; default this node); 404 for any other
    node until the cluster forwards to registered nodes."""
    value: Any = None
    refuse_addresses(request, body)
    if body is not None and "node_id" in body:
        value = body["node_id"]
    elif "node_id" in request.query:
        value = request.query["node_id"]
    own = request.app[SETTINGS].cluster.node_id
    if value is None or value == "":
        return own
    if not isinstance(value, str):
        raise BadRequest("node_id must be a string", param="node_id")
    if value != own:
        elsewhere(request, value)
    return own


def elsewhere(request: web.Request, node_id: str) -> NoReturn:
    """Another node's id: on a master, RemoteNode (the request is relayed there); else 404."""
    settings = request.app.get(SETTINGS)
    master = settings is not None and settings.cluster.role == "master"
    entry = request.app[CLUSTER].registry.node(node_id) if master else None
    if entry is None:
        raise NotFound(f"unknown node {node_id[:64]!r}", param="node_id")
    raise RemoteNode(entry)


def resolve_model(request: web.Request, model_id: Any) -> ModelConfig:
    if not isinstance(model_id, str) or not model_id:
        raise BadRequest('"model" must be a non-empty string', param="model")
    config = request.app[CATALOG].resolve(model_id)
    if config is None:
        raise ModelNotFound(model_id)
    return config
