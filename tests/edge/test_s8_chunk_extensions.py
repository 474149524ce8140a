"""S8, chunk extensions: a malformed chunk extension (a bare LF in it, a control character, a
CR not followed by LF) is a 400 and nothing reaches a backend; a well-formed extension is
ignored and the body is read as usual.

The body, sent in pieces, names a model: had any of it been accepted, the model would load.
The router runs behind the production listener (`capped_site`, as `tensor-router start` runs
it): aiohttp queues such an error as the next message and left the request being served waiting
for the rest of its body until a deadline; the listener fails that body at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from router.app import create_app
from router.edge.listener import capped_site, runner_kwargs
from tests.support.harness import RouterHarness

BODY = json.dumps({"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]}).encode()
HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


def chunked(extension: bytes) -> list[bytes]:
    """The body as two chunks, the first carrying `extension` after its size."""
    first, second = BODY[:10], BODY[10:]
    return [
        b"%x" % len(first) + extension + b"\r\n" + first + b"\r\n",
        b"%x\r\n" % len(second) + second + b"\r\n0\r\n\r\n",
    ]


@contextlib.asynccontextmanager
async def production_listener(harness: RouterHarness) -> AsyncIterator[int]:
    settings = harness.settings()
    harness.app = create_app(settings)
    runner = web.AppRunner(harness.app, handler_cancellation=True, **runner_kwargs(settings))
    await runner.setup()
    site = capped_site(runner, settings, "127.0.0.1", 0)
    await site.start()
    try:
        yield site.port
    finally:
        await runner.cleanup()


async def send(port: int, pieces: list[bytes]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(HEAD)
        for piece in pieces:  # in pieces, with pauses, as a real client's body arrives
            await asyncio.sleep(0.05)
            writer.write(piece)
            await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.parametrize(
    "extension",
    [b";a=b\nc", b";a\nb=c", b";a=\x01", b";a=b\rc", b';a="b\nc"'],
    ids=["lf-in-value", "lf-in-name", "control-char", "bare-cr", "lf-in-quoted"],
)
async def test_s8_malformed_chunk_extensions_are_refused_and_never_forwarded(
    harness: RouterHarness, extension: bytes
) -> None:
    harness.model("chat-a")
    async with production_listener(harness) as port:
        answer = await send(port, chunked(extension))
        assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.0 400")), answer[:80]
        assert b"invalid_request_error" in answer  # the OpenAI shape, not aiohttp's page
        assert harness.runtimes.spawn_count == 0


@pytest.mark.parametrize("extension", [b";a=b", b";a", b';a="b c"', b";a=b;c=d"])
async def test_s8_well_formed_chunk_extensions_are_ignored(
    harness: RouterHarness, extension: bytes
) -> None:
    """The control: the same requests with valid extensions are served (RFC 9112 7.1.1)."""
    harness.model("chat-a")
    async with production_listener(harness) as port:
        answer = await send(port, chunked(extension))
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert harness.runtimes.spawn_count == 1
