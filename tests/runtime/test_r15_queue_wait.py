"""R15: the request that waited for a swap records how long it waited.

A streams on chat-a; B for chat-b arrives on the same lane and waits for A to finish (drain,
not cancel), the swap, and its own load. B's analytics event carries `queue_wait_ms`, which
must cover A's remaining time and stay within B's whole time as its client saw it. (With the
wait not recorded, every event said 0: audit mutation M6b.)
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

from router.appkeys import STORE
from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"


async def test_r15_queue_wait_ms_covers_the_drained_streams_remaining_time(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = "--token-rate 10"
    client = await harness.start(harness.settings(stop_grace=1))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    first_token = asyncio.Event()

    async def stream_a() -> float:
        body = chat("chat-a", stream=True, max_tokens=15)  # ~1.5 s
        async with client.stream("POST", CHAT, json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if '"content": "tok' in line:
                    first_token.set()
        return time.monotonic()

    a_task = asyncio.create_task(stream_a())
    await asyncio.wait_for(first_token.wait(), 10)
    b_sent = time.monotonic()
    b = await client.post(CHAT, json=chat("chat-b", max_tokens=1))
    b_done = time.monotonic()
    a_done = await a_task
    assert b.status_code == 200, b.text
    remaining = a_done - b_sent
    assert remaining > 0.5, f"A had only {remaining:.2f}s left when B was sent"

    flushed = (await client.post("/router/v1/site/analytics/flush")).json()
    assert flushed["persisted"] == ["local"]
    assert harness.app is not None and harness.app[STORE] is not None
    with sqlite3.connect(harness.tmp / "data" / "router.sqlite") as db:
        (waited_ms,) = db.execute(
            "SELECT queue_wait_ms FROM analytics_events WHERE model = 'chat-b'"
        ).fetchone()
    waited = waited_ms / 1000.0
    # The router saw B arrive after b_sent and A end before a_done; 0.25 s covers the two
    # loopback hops. The upper bound is B's whole round trip.
    assert waited >= remaining - 0.25, f"B waited {waited:.3f}s; A had {remaining:.3f}s left"
    assert waited <= b_done - b_sent, f"B waited {waited:.3f}s of {b_done - b_sent:.3f}s"
