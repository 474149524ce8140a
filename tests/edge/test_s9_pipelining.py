"""S9: pipelined requests and trailer floods against a real router process (`tensor-router
start`, the production listener): the router's memory stays bounded, every pipelined request
is answered in order, and a flood of trailer fields is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import psutil

from tests.support.harness import RouterHarness
from tests.support.router_process import new_router

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
MiB = 1024 * 1024


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


async def test_s9_ten_thousand_pipelined_requests_on_one_socket(
    tmp_harness: RouterHarness,
) -> None:
    router = new_router(tmp_harness)
    await router.start()
    n = 10_000
    before = rss(router.pid)
    peak = before
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    try:
        writer.write(HEALTH * n)  # all at once (420 KB); the answers are read afterwards
        await asyncio.sleep(1.0)  # the router reads what it will before anyone reads answers
        peak = max(peak, rss(router.pid))
        answers = 0
        async with asyncio.timeout(120):
            while answers < n:  # each answer whole, in order: head, then its body
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 OK"), head[:80]
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                assert await reader.readexactly(length) == b'{"status": "ok"}'
                answers += 1
                if answers % 1000 == 0:
                    peak = max(peak, rss(router.pid))
    finally:
        writer.close()
    assert answers == n
    grew = (peak - before) / MiB
    assert grew < 8, f"the router grew {grew:.1f} MiB for one pipelining socket"


async def one_answer(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(HEALTH)
        return (await asyncio.wait_for(reader.readline(), 10)).rstrip()
    finally:
        writer.close()


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionError):
        while piece := await reader.read(65536):
            data += piece
    return data


async def test_s9_a_trailer_flood_is_refused_with_memory_bounded(
    tmp_harness: RouterHarness,
) -> None:
    tmp_harness.model("chat-a")
    router = new_router(tmp_harness)
    await router.start()
    body = json.dumps({"model": "chat-a", "messages": [{"role": "user", "content": "x"}]})
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n0\r\n" % (len(body), body.encode())
    trailers = b"X-Trailer: a\r\n" * 100_000
    before = rss(router.pid)
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    try:
        writer.write(head + chunk)
        with contextlib.suppress(ConnectionError):  # refused before the flood is all sent
            for start in range(0, len(trailers), 64 * 1024):  # in pieces, as a network does
                writer.write(trailers[start : start + 64 * 1024])
                await writer.drain()
            writer.write(b"\r\n")
            await writer.drain()
        answer = await asyncio.wait_for(read_until_closed(reader), 30)
    finally:
        writer.close()
    grew = (rss(router.pid) - before) / MiB
    # Refused: a 4xx, or the connection reset before the client could read one (the router
    # closes with the flood still unread); never an answer from a backend.
    assert answer == b"" or answer.startswith((b"HTTP/1.1 4", b"HTTP/1.0 4")), answer[:200]
    assert grew < 8, f"the router grew {grew:.1f} MiB for one trailer flood"
    # The body itself was whole (its JSON read before the trailers), so the model may load;
    # the router is unharmed and serves the next client.
    assert await one_answer(router.port) == b"HTTP/1.1 200 OK"
