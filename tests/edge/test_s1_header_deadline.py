"""S1 at the listener: the header deadline counts from a request's first byte, and a burst of
connections waits in the accept queue instead of having its handshakes dropped.

A real `capped_site` (the production listener) on 127.0.0.1 with a one-route app.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from router.config import Settings
from router.config.schema import ServerSection
from router.edge.listener import capped_site, runner_kwargs

SOMAXCONN = int(Path("/proc/sys/net/core/somaxconn").read_text())


async def _ok(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@contextlib.asynccontextmanager
async def listening(**server: object) -> AsyncIterator[int]:
    conf = Settings(server=ServerSection(**server))  # type: ignore[arg-type]
    app = web.Application()
    app.router.add_get("/v1/models", _ok)
    runner = web.AppRunner(app, **runner_kwargs(conf))
    await runner.setup()
    site = capped_site(runner, conf, "127.0.0.1", 0)
    await site.start()
    try:
        yield site.port
    finally:
        await runner.cleanup()


async def test_s1_the_header_deadline_counts_from_the_first_byte_not_the_last() -> None:
    """Header bytes trickled faster than the deadline do not extend it (audit mutation M19:
    a deadline re-armed on every byte let this request live as long as the trickle)."""
    head = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 40 + b"\r\n\r\n"
    async with listening(header_timeout=0.5) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sent = 0

        async def trickle() -> None:
            nonlocal sent
            with contextlib.suppress(OSError):
                for byte in head:  # one byte per 0.1 s: ~7 s for the whole head
                    writer.write(bytes([byte]))
                    await writer.drain()
                    sent += 1
                    await asyncio.sleep(0.1)

        started = time.monotonic()
        task = asyncio.create_task(trickle())
        answer = await asyncio.wait_for(reader.readline(), 30)  # the status line
        waited = time.monotonic() - started
        task.cancel()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert sent < len(head), "the whole head went through: the deadline never fired"
        assert waited >= 0.4, f"cut after {waited:.2f}s, before the 0.5 s deadline"


async def test_s1_a_burst_of_connections_waits_in_the_accept_queue() -> None:
    """While the router's loop is busy (blocked here on purpose), the kernel completes
    handshakes into the accept queue. With aiohttp's default queue of 128 the 129th was dropped,
    and under S1's reconnecting attackers a legitimate client then waited out SYN
    retransmissions (seconds) and its probe failed: the S1 test's flake."""
    burst = min(300, SOMAXCONN)
    async with listening(max_connections=1024, max_connections_per_peer=1024) as port:
        held: list[socket.socket] = []
        try:
            # Blocking connects: the event loop does not run, so nothing is accepted.
            for _ in range(burst):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.settimeout(0.5)  # a queued handshake completes in the kernel at once
                held.append(sock)
                sock.connect(("127.0.0.1", port))
        except TimeoutError:
            pass
        finally:
            connected = sum(1 for s in held if _connected(s))
            for sock in held:
                sock.close()
        assert connected == burst, f"only {connected} of {burst} handshakes completed"


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
        return True
    except OSError:
        return False
