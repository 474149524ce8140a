"""Reading a whole body with a cap, on either leg (a client's request, a backend's answer), and
the one reader of a request body the router parses itself.

Every handler that reads its request body does it through `read_body` (directly, or through
`read_json`): the one place where a cap, and a deadline for a body that trickles in, apply.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from aiohttp import StreamReader, web

from router.errors import BadRequest, PayloadTooLarge, RouterError, UnsupportedMediaType

# The body as read, kept for a relay that sends it on (appkeys re-exports it).
RAW_BODY: web.RequestKey[bytes] = web.RequestKey("raw_body", bytes)
# Content types a small JSON control body may carry: clients (curl, scripts) often send none,
# or text/plain or octet-stream; a form or multipart body on a JSON route is refused.
CONTROL_TYPES = frozenset({"application/json", "application/octet-stream", "text/plain", ""})
CONTROL_SETTING = "limits.max_control_body_mb"


async def read_capped_stream(
    stream: StreamReader, declared: int | None, cap: int, too_large: RouterError
) -> bytes:
    """Every byte to the end of the body, raising `too_large` once it passes `cap` bytes.

    Reads to the end: a body arrives in as many pieces as the network cuts it into, and
    `StreamReader.read(n)` answers only what is buffered so far. A declared length over the cap
    is refused before anything is read.
    """
    if declared is not None and declared > cap:
        raise too_large
    chunks, total = [], 0
    async for chunk in stream.iter_any():
        total += len(chunk)
        if total > cap:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def control_cap(request: web.Request) -> int:
    """The control body cap: create_app sets the app's `client_max_size` from
    limits.max_control_body_mb, so every app that serves the routes carries it."""
    return request.client_max_size


async def read_body(request: web.Request, cap: int, setting: str = CONTROL_SETTING) -> bytes:
    """The request's whole body, refused with 413 once it passes `cap` bytes (`setting` names
    the limit in the message); kept on the request under RAW_BODY. Read once: a second call
    answers the kept bytes."""
    kept: bytes | None = request.get(RAW_BODY)
    if kept is not None:
        return kept
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


async def read_json(
    request: web.Request,
    cap: int | None = None,
    *,
    setting: str = CONTROL_SETTING,
    required: bool = False,
    types: Collection[str] | None = CONTROL_TYPES,
) -> dict[str, Any]:
    """The request's JSON object (`{}` for an empty body unless `required`).

    `cap` defaults to the control cap; `types` are the content types a non-empty body may
    carry (415 otherwise; None accepts any, for surfaces whose clients send what they like).
    The raw bytes stay on the request (RAW_BODY) for a caller that also needs them.
    """
    raw = await read_body(request, control_cap(request) if cap is None else cap, setting)
    if types is not None and raw.strip() and request.content_type not in types:
        raise UnsupportedMediaType("send the body as application/json")
    return parse_json_object(raw, required=required)
