"""S1, S2: a 408 sent while the client is still sending is closed with a FIN, not a reset.

Closing a socket with unread bytes makes the kernel answer with a reset, which can destroy
the 408 before the client reads it (a trickling client then saw "connection reset by peer",
the flake of test_body_deadline's upload case on a busy machine). The router half-closes
after the answer and keeps dropping what arrives for `REJECT_LINGER` (router/edge/listener.py).
A client that keeps writing after the 408 is therefore not reset before the linger ends.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from router.edge.listener import REJECT_LINGER
from tests.edge.test_body_deadline import DEADLINE, _listening
from tests.support.harness import RouterHarness

HEADS = {
    "body": b"POST /router/v1/load HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
    "headers": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
}


async def _read_to_eof(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    answer = b""
    async with asyncio.timeout(DEADLINE + 6):
        while chunk := await loop.sock_recv(sock, 65536):
            answer += chunk
    return answer


@pytest.mark.parametrize("cut", sorted(HEADS))
async def test_a_client_still_sending_after_its_408_is_not_reset(
    harness: RouterHarness, cut: str
) -> None:
    harness.model("chat-a")
    loop = asyncio.get_running_loop()
    async with _listening(harness) as port:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, ("127.0.0.1", port))
            await loop.sock_sendall(sock, HEADS[cut])
            answer = await _read_to_eof(loop, sock)  # the 408, then the router's FIN
            ended = time.monotonic()
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            try:  # the rest of what the client had to send, in two writes
                for _ in range(2):
                    await loop.sock_sendall(sock, b"x" * 4096)
                    await asyncio.sleep(0.2)
            except (ConnectionResetError, BrokenPipeError):
                # A closed socket resets the first write, and the second fails: allowed only
                # once the linger is over, never at once.
                assert time.monotonic() - ended >= REJECT_LINGER, "reset before the linger"
        finally:
            sock.close()
