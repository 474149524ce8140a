"""Lease a runtime for a streamed OpenAI chat request, telling the client while it waits.

A request that is granted within `runtime.announce_wait_after` is answered exactly as before.
One that waits longer gets its `200 text/event-stream` answer started (router/edge/announce.py)
with a comment line `: waiting, position 2, eta 14 s` at once and then every `EVERY` seconds
until its lease is granted; the backend's stream then continues the same answer. Until the
wait passes the setting nothing is sent, so a request refused quickly (queue full, missing
files, a load that fails at once) still gets its plain HTTP error. Only `POST
/v1/chat/completions` with `"stream": true` is announced: Ollama's NDJSON and every other
surface get nothing extra (docs/swaps.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from aiohttp import web

from router.appkeys import RUNTIMES, SETTINGS
from router.config import ModelConfig
from router.domain import Lane
from router.edge import announce
from router.edge.request import caller_of
from router.forwarding.selector import Selection
from router.runtime.queues import Ticket
from router.runtime.state import Lease

CHAT = "/v1/chat/completions"
EVERY = 1.0  # s between comment lines (also what keeps idle proxies from closing the stream)


def announces(request: web.Request, selection: Selection) -> bool:
    """A streamed OpenAI chat completion, as the client sent it."""
    if request.method != "POST" or request.path != CHAT or not selection.complete:
        return False
    try:
        body = json.loads(selection.prefix)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


async def ensure(
    request: web.Request,
    selection: Selection,
    config: ModelConfig,
    lane: Lane,
    keep_alive: float | None = None,
) -> Lease:
    runtimes = request.app[RUNTIMES]
    after = request.app[SETTINGS].runtime.announce_wait_after
    caller = caller_of(request)  # its class, fairness name and cap in the queue
    if after <= 0 or announce.ANNOUNCED in request or not announces(request, selection):
        return await runtimes.ensure(config, lane, keep_alive=keep_alive, caller=caller)
    ticket = Ticket()
    waiting = asyncio.ensure_future(
        runtimes.ensure(config, lane, keep_alive=keep_alive, ticket=ticket, caller=caller)
    )
    try:
        await asyncio.wait({waiting}, timeout=after)
        if not waiting.done():
            out = await announce.start(request)
            while not waiting.done():
                row = runtimes.position(ticket) or {}
                await out.write(announce.comment(row.get("position"), row.get("eta_s")))
                await asyncio.wait({waiting}, timeout=EVERY)
        return waiting.result()
    except BaseException:
        _give_up(waiting)
        raise


def _give_up(waiting: asyncio.Future[Lease]) -> None:
    """The client left (or a write failed): stop waiting, or hand a granted lease back."""
    if not waiting.done():
        waiting.cancel()
    elif not waiting.cancelled() and waiting.exception() is None:
        waiting.result().release()
    else:
        with contextlib.suppress(BaseException):
            waiting.exception()  # retrieved: no "never retrieved" warning
