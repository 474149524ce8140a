"""Issue 26: `GET /router/v1/status` lists each lane's queue with positions and ETAs."""

from __future__ import annotations

import asyncio

from router.domain import Lane
from tests.support.harness import RouterHarness, chat, wait_for

CHAT = "/v1/chat/completions"


async def test_status_lists_the_queue_in_serve_order_with_measured_etas(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = "--token-rate 20"
    client = await harness.start(harness.settings(stop_grace=1, max_in_flight=1))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    status = (await client.get("/router/v1/status")).json()
    assert status["queue"] == {lane.value: [] for lane in Lane}
    # One measured request of chat-a: its per-request figure.
    assert (await client.post(CHAT, json=chat("chat-a", max_tokens=2))).status_code == 200
    running = asyncio.create_task(client.post(CHAT, json=chat("chat-a", max_tokens=60)))
    assert await wait_for(lambda: harness.runtimes.views()[0].leases == 1, 20)
    waiting_b = asyncio.create_task(client.post(CHAT, json=chat("chat-b", max_tokens=1)))
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 1, 20)
    waiting_a = asyncio.create_task(client.post(CHAT, json=chat("chat-a", max_tokens=1)))
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 2, 20)

    queue = (await client.get("/router/v1/status")).json()["queue"]["text"]
    # Grouped: the loaded model's request goes before the swap, though it came later.
    assert [(r["model"], r["position"]) for r in queue] == [("chat-a", 1), ("chat-b", 2)]
    assert all(r["waiting_s"] >= 0 for r in queue)
    assert isinstance(queue[0]["eta_s"], float)  # chat-a's load and request times are measured
    assert queue[1]["eta_s"] is None  # chat-b never loaded here: no figure, no number
    for task in (running, waiting_a, waiting_b):
        assert (await task).status_code == 200
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 0, 20)
    status = (await client.get("/router/v1/status")).json()
    assert status["queue"]["text"] == []
