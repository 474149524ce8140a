"""A whole (non-streamed) answer leaves before the router's own bookkeeping for the request.

The recording, the lease release and the middlewares' unwinding used to run between the
backend's answer and its first byte to the client (aiohttp writes a returned response after
the handler); on a loaded box that was time the client waited for (bench/RESULTS.md, real
backend). Real router socket, fake backend through the real supervisor.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from router.appkeys import RECORDER
from tests.support.harness import RouterHarness, chat


def _request(port: int, body: bytes) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _read_response(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while b"\r\n\r\n" not in data:
        data += await loop.sock_recv(sock, 65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += await loop.sock_recv(sock, 65536)
    return data


async def test_whole_answer_reaches_the_client_before_it_is_recorded(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.model("chat-a")
    client = await harness.start()
    assert (await client.post("/v1/chat/completions", json=chat("chat-a"))).status_code == 200
    assert harness.server is not None and harness.app is not None
    port = harness.server.port
    assert port is not None
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    at_record: list[bytes] = []
    recorder = harness.app[RECORDER]
    original = recorder.record

    def record(*args: Any, **kwargs: Any) -> None:
        try:  # what the client's socket already holds when the request is recorded
            at_record.append(sock.recv(65536, socket.MSG_PEEK))
        except BlockingIOError:
            at_record.append(b"")
        original(*args, **kwargs)

    monkeypatch.setattr(recorder, "record", record)
    try:
        await asyncio.get_running_loop().sock_sendall(
            sock, _request(port, json.dumps(chat("chat-a")).encode())
        )
        answer = await _read_response(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"\r\ncontent-length:" in answer.lower()  # whole: a length, not chunked framing
    assert at_record == [answer], "the answer was not (all) sent before the request was recorded"
