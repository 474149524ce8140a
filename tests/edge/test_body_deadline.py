"""S2, S5: one body deadline for every route that reads a body.

A body that trickles in, or a `Content-Length` longer than what is sent, is answered 408 at
the body deadline (`server.header_timeout` plus one second per `BODY_MIN_RATE` bytes, see
router/edge/listener.py) on control, site, upload and inference routes alike, in the route's
own error shape, and the connection is closed. The router app of tests/harness.py behind the
real listener (`capped_site`, as `router.server.serve` builds it), raw sockets writing the body
in pieces with pauses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from router.app import create_app
from router.config import Settings
from router.edge.listener import capped_site, runner_kwargs
from tests.support.harness import RouterHarness

DEADLINE = 1.0
# (path, content type, a body the route would accept)
ROUTES = [
    ("/router/v1/load", "application/json", b'{"model": "chat-a"}' + b" " * 200),
    ("/router/v1/unload", "application/json", b'{"model": "chat-a"}' + b" " * 200),
    ("/router/v1/site/models/state", "application/json", b'{"id": "chat-a", "enabled": true}'),
    (
        "/upload/image",
        "multipart/form-data; boundary=XyZ",
        b'--XyZ\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n'
        b"Content-Type: image/png\r\n\r\n" + b"\x89PNG" * 64 + b"\r\n--XyZ--\r\n",
    ),
    ("/v1/chat/completions", "application/json", b'{"messages": [], "model": "chat-a"}'),
]


def _settings(harness: RouterHarness) -> Settings:
    settings = harness.settings()
    server = settings.server.model_copy(update={"header_timeout": DEADLINE})
    return settings.model_copy(update={"server": server})


@asynccontextmanager
async def _listening(harness: RouterHarness) -> AsyncIterator[int]:
    """The harness's router on the production listener; its port."""
    settings = _settings(harness)
    harness.app = create_app(settings)
    runner = web.AppRunner(harness.app, handler_cancellation=True, **runner_kwargs(settings))
    await runner.setup()
    site = capped_site(runner, settings, "127.0.0.1", 0)
    await site.start()
    try:
        yield site.port
    finally:
        await runner.cleanup()


async def _send_slowly(
    writer: asyncio.StreamWriter, head: bytes, pieces: list[bytes], pause: float
) -> None:
    writer.write(head)
    for piece in pieces:
        await writer.drain()
        await asyncio.sleep(pause)
        if writer.is_closing():
            return
        writer.write(piece)
    await writer.drain()
    await asyncio.sleep(3600)  # then hold the connection open, sending nothing more


async def _answer(port: int, path: str, ctype: str, body: bytes, lie: bool) -> tuple[bytes, float]:
    """The router's whole answer (read to the close) and how long it took."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    declared = len(body) + 100 if lie else len(body)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    if lie:  # all of it at once, but 100 bytes short of what was declared
        pieces, pause = [body], 0.05
    else:  # a byte every 0.2 s: the body would take minutes
        pieces, pause = [body[i : i + 1] for i in range(len(body))], 0.2
    loop = asyncio.get_running_loop()
    started = loop.time()
    sender = asyncio.create_task(_send_slowly(writer, head, pieces, pause))
    try:
        async with asyncio.timeout(DEADLINE + 6):
            answer = await reader.read()  # to EOF: the router closes after the 408
        return answer, loop.time() - started
    finally:
        sender.cancel()
        writer.close()


@pytest.mark.parametrize("lie", [False, True], ids=["trickle", "short-content-length"])
@pytest.mark.parametrize("route", ROUTES, ids=[r[0] for r in ROUTES])
async def test_s2_s5_every_body_gets_408_at_the_deadline(
    harness: RouterHarness, route: tuple[str, str, bytes], lie: bool
) -> None:
    harness.model("chat-a")
    path, ctype, body = route
    async with _listening(harness) as port:
        answer, took = await _answer(port, path, ctype, body, lie)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert took < DEADLINE + 3.0, took  # the deadline plus what a busy machine adds
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert "did not arrive" in error["message"]
    assert harness.runtimes.spawn_count == 0  # nothing was loaded for it
