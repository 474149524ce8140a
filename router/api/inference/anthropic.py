"""Anthropic Messages, `POST /v1/messages`: forwarded, after the one check the router can make.

A body without a `messages` list is refused here with a 400 naming the field, instead of
waking a backend to answer it with a 500 of its own. Only a body held in full is checked (one
within limits.selector_scan_mb, which is every real request): a larger one streams through.
Every other field is the backend's business (docs/decisions.md, "Which body fields").
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from router import inference as pipeline
from router.appkeys import SETTINGS
from router.domain import MiB
from router.edge import Handler, matched_route, parse_json_object
from router.errors import BadRequest, RequestTimeout
from router.forwarding import Selection, read_selector


def check_messages(raw: bytes) -> None:
    """Pure: 400 unless `raw` is a JSON object whose `messages` is a list."""
    body = parse_json_object(raw, required=True)
    if not isinstance(body.get("messages"), list):
        raise BadRequest('"messages" must be a list of messages', param="messages")


async def messages(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    scan_limit = int(settings.limits.selector_scan_mb * MiB)
    idle = settings.server.header_timeout
    try:
        async with asyncio.timeout(idle):  # S2, as for every forwarded body
            selection: Selection = await read_selector(request, matched_route(request), scan_limit)
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {idle:g}s (server.header_timeout)"
        ) from None
    if selection.complete:
        check_messages(selection.prefix)
    return await pipeline.forward(request, selection)


HANDLERS: dict[str, Handler] = {"anthropic.messages": messages}
