"""A backend that closes a keep-alive connection just as the router reuses it.

Seen on the real llama-server in whole-suite runs (S27's bystander after a long stream got a
502 "Server disconnected" / "Can not write request body" from a live backend). A clean close
before any answer on a pooled connection is sent once more on another connection
(router/forwarding/opening.py `closed_keep_alive`); a reset stays a 502 (R31,
tests/forwarding/test_proxy_stream.py). The fake's `--close-reused-once` closes the first
request that arrives on a connection that served one before.
"""

from __future__ import annotations

from types import SimpleNamespace

import aiohttp
import pytest

from router.errors import BadGateway
from router.forwarding.opening import CONNECT_BACKOFF, UpstreamRequest
from router.forwarding.proxy import Proxy
from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"


async def test_a_closed_keep_alive_connection_is_not_a_502(harness: RouterHarness) -> None:
    record = harness.tmp / "requests.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--close-reused-once --record-requests {record}"
    client = await harness.start()
    for _ in range(3):  # the router's pool reuses its connection to the backend
        r = await client.post(CHAT, json=chat("chat-a", max_tokens=2))
        assert r.status_code == 200, r.text
    lines = record.read_text().splitlines()
    assert sum('"closed-reused"' in line for line in lines) == 1, lines  # it did close one
    assert harness.runtimes.spawn_count == 1  # a live backend: not relaunched


class _Session:
    """The proxy's one seam to the backend: refusals while the backend starts, then a clean
    close on the last connect attempt."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    async def request(self, *args: object, **kwargs: object) -> aiohttp.ClientResponse:
        self.calls += 1
        if self.calls <= self.refusals:
            key = SimpleNamespace(host="127.0.0.1", port=1, ssl=False)
            raise aiohttp.ClientConnectorError(key, OSError(111, "Connection refused"))  # type: ignore[arg-type]
        raise aiohttp.ServerDisconnectedError()


async def test_a_close_on_the_last_connect_attempt_is_a_502() -> None:
    """The one resend has no pass left after the whole connect backoff: the close is the
    answer (a 502), never the loop's end (a 500)."""
    session = _Session(refusals=len(CONNECT_BACKOFF))
    proxy = Proxy(session, idle_timeout=5, response_timeout=5, connect_window=60)  # type: ignore[arg-type]
    upstream = UpstreamRequest("POST", "http://127.0.0.1:1/x", {}, b"{}", replayable=True)
    with pytest.raises(BadGateway, match="Server disconnected"):
        await proxy.opener.open(upstream, aiohttp.ClientTimeout())
    assert session.calls == len(CONNECT_BACKOFF) + 1
