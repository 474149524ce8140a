"""A streamed OpenAI answer started early, while its request still waits for a runtime.

The inference handler starts a `200 text/event-stream` answer once a streamed chat request has
waited `runtime.announce_wait_after`, and keeps it informed with SSE comment lines (which every
SSE client skips). From then on nothing can change the status line, so the proxy writes the
backend's stream into this same response, and an error is sent as one OpenAI-shaped
`data: {"error": ...}` event (the `openai` client raises it as an APIError) before the stream
ends. The response is kept on the request under `ANNOUNCED`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from aiohttp import web

from router.domain import Surface
from router.edge.headers import SSE_HEADERS
from router.errors import RouterError, error_body

ANNOUNCED: web.RequestKey[web.StreamResponse] = web.RequestKey("announced", web.StreamResponse)


async def start(request: web.Request) -> web.StreamResponse:
    out = web.StreamResponse(
        status=200,
        headers=SSE_HEADERS,
    )
    await out.prepare(request)
    request[ANNOUNCED] = out
    return out


def comment(position: int | None, eta_s: float | None) -> bytes:
    """`: waiting, position 2, eta 14 s` (what is not known is left out, never guessed)."""
    parts = ["waiting"]
    if position is not None:
        parts.append(f"position {position}")
    if eta_s is not None:
        parts.append(f"eta {round(eta_s)} s")
    return (": " + ", ".join(parts) + "\n\n").encode()


async def fail(
    out: web.StreamResponse, err: RouterError, secrets: Iterable[str]
) -> web.StreamResponse:
    """End an announced stream with the error as an OpenAI error event."""
    body = json.dumps(error_body(err, Surface.OPENAI, secrets), separators=(",", ":"))
    try:
        await out.write(f"data: {body}\n\n".encode())
        await out.write_eof()
    except ConnectionError:
        pass  # the client left: nobody to tell
    return out
