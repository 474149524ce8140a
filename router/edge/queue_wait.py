"""`X-Tensors-Queue-Wait-Ms`: how long an answer waited in a runtime queue (issue 26).

A handler that leased a runtime notes the wait on its request; the app's response-prepare hook
puts it on the answer (0 when the lease was granted at once). Answers that never leased a
runtime (management routes, relayed or lent requests) carry no header.
"""

from __future__ import annotations

from aiohttp import web

HEADER = "X-Tensors-Queue-Wait-Ms"
QUEUE_WAIT_MS: web.RequestKey[float] = web.RequestKey("queue_wait_ms", float)


def note(request: web.Request, waited_ms: float) -> None:
    """This request waited `waited_ms` in all for its lease (set before the answer starts)."""
    request[QUEUE_WAIT_MS] = waited_ms


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    waited = request.get(QUEUE_WAIT_MS)
    if waited is not None:
        response.headers[HEADER] = str(max(0, round(waited)))
