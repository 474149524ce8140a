"""Hostile HTTP at the edge, through the real app on a real socket: S7 (a gzip body that
inflates far past the cap) and S8 (request smuggling shapes) never reach a backend."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.harness import RouterHarness, harness_fixture


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[RouterHarness]:
    async for h in harness_fixture(tmp_path):
        h.model("chat-a")
        yield h


async def raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def test_s7_gzip_bomb_on_a_control_route_is_capped_after_inflating(
    harness: RouterHarness,
) -> None:
    settings = harness.settings()
    settings = settings.model_copy(
        update={"limits": settings.limits.model_copy(update={"max_control_body_mb": 1})}
    )
    client = await harness.start(settings)
    inflated = json.dumps({"model": "chat-a", "pad": "a" * (8 * 1024 * 1024)}).encode()
    bomb = gzip.compress(inflated, 9)
    assert len(bomb) < 64 * 1024  # well under the cap on the wire
    r = await client.post(
        "/router/v1/load",
        content=bomb,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert harness.runtimes.spawn_count == 0


@pytest.mark.parametrize(
    "request_bytes",
    [
        # Content-Length and Transfer-Encoding together (CL.TE smuggling).
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        # Obsolete line folding.
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n b\r\n"
        b"Content-Length: 2\r\n\r\n{}",
        # A bare CR inside a header value.
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\rb\r\n\r\n",
        # An invalid HTTP version.
        b"GET /health HTTP/9.7\r\nHost: 127.0.0.1\r\n\r\n",
    ],
    ids=["cl-te", "obs-fold", "bare-cr", "bad-version"],
)
async def test_s8_malformed_framing_is_refused_and_never_forwarded(
    harness: RouterHarness, request_bytes: bytes
) -> None:
    await harness.start()
    assert harness.server is not None
    answer = await raw(harness.server.port, request_bytes)
    assert answer.startswith(b"HTTP/1.1 400") or answer.startswith(b"HTTP/1.0 400"), answer[:60]
    assert harness.runtimes.spawn_count == 0


def test_s8_aiohttp_uses_its_c_http_parser() -> None:
    # The pure-Python fallback has had smuggling bugs the C parser did not (CVE-2023-37276).
    from aiohttp import http_parser

    assert http_parser.HttpRequestParser.__module__ == "aiohttp._http_parser"
