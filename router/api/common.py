"""Small helpers shared by the handlers: the matched route, JSON bodies, model resolution."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from router.appkeys import CATALOG, MATCH, SETTINGS
from router.classify import Match, Route
from router.config import ModelConfig
from router.errors import BadRequest, ModelNotFound, PayloadTooLarge, UnsupportedMediaType

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def match_of(request: web.Request) -> Match:
    return request[MATCH]


def route_of(request: web.Request) -> Route:
    return match_of(request).route


async def read_control_json(request: web.Request, *, required: bool = False) -> dict[str, Any]:
    """A small JSON object the router parses itself (control and site routes)."""
    cap = int(request.app[SETTINGS].limits.max_control_body_mb * 1024 * 1024)
    if request.content_length is not None and request.content_length > cap:
        raise PayloadTooLarge(f"the body is larger than {cap} bytes (limits.max_control_body_mb)")
    raw = await request.content.read(cap + 1)
    if len(raw) > cap:
        raise PayloadTooLarge(f"the body is larger than {cap} bytes (limits.max_control_body_mb)")
    if not raw.strip():
        if required:
            raise BadRequest("a JSON body is required")
        return {}
    ctype = request.content_type
    if ctype not in ("application/json", "application/octet-stream", "text/plain", ""):
        raise UnsupportedMediaType("send the body as application/json")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def resolve_model(request: web.Request, model_id: Any) -> ModelConfig:
    if not isinstance(model_id, str) or not model_id:
        raise BadRequest('"model" must be a non-empty string')
    config = request.app[CATALOG].resolve(model_id)
    if config is None:
        raise ModelNotFound(model_id)
    return config
