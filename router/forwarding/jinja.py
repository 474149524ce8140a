"""Merge a config's `jinja_kwargs` into a chat request's `chat_template_kwargs` (pure).

Profiles that differ only in these values share one loaded runtime (runtime_state.py
`runtime_identity`), so the values must travel with each request. Precedence follows
`router_jinja_kwargs_precedence`: `config` (default) or `client`; a client null is absent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from router.errors import BadRequest

FIELD = "chat_template_kwargs"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key == FIELD and key in seen:
            raise BadRequest(f"duplicate {FIELD} fields")
        seen[key] = value
    return seen


def merge_chat_template_kwargs(
    body: bytes, configured: Mapping[str, Any], precedence: str
) -> bytes:
    """The request body with the configured kwargs merged in; unchanged when none apply."""
    if not configured:
        return body
    try:
        request = json.loads(body, object_pairs_hook=_pairs)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadRequest("the body must be a JSON object")
    client = request.get(FIELD)
    if client is None:
        client = {}
    if not isinstance(client, dict):
        raise BadRequest(f"{FIELD} must be a JSON object")
    client = {k: v for k, v in client.items() if v is not None}
    merged = {**client, **configured} if precedence == "config" else {**configured, **client}
    request[FIELD] = merged
    return json.dumps(request, ensure_ascii=False).encode()
