"""Issue 35 through HTTP on fake backends: the caller a request carries (set by the test-only
seam of tests/support/callers.py until scoped keys land) reaches the queue, which serves the
waiting interactive request first and shows each waiting request's key name and class."""

from __future__ import annotations

import asyncio

import httpx

from router.domain import Caller, Lane, Priority
from tests.support.callers import as_header, set_caller
from tests.support.harness import RouterHarness, chat, wait_for

CHAT = "/v1/chat/completions"
PERSON = Caller("alice", Priority.INTERACTIVE)
AGENT = Caller("nightly", Priority.BATCH)


async def test_status_names_each_waiting_requests_key_and_class(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--token-rate 20"
    settings = harness.settings(max_in_flight=1)
    client = await harness.start(settings, middlewares=[set_caller])
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200

    def send(caller: Caller, tokens: int) -> asyncio.Task[httpx.Response]:
        body = chat("chat-a", max_tokens=tokens)
        return asyncio.create_task(client.post(CHAT, json=body, headers=as_header(caller)))

    running = send(AGENT, 40)  # holds the one slot about 2 s
    assert await wait_for(lambda: harness.runtimes.views()[0].leases == 1, 20)
    batch = [send(AGENT, 1) for _ in range(2)]
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 2, 20)
    person = send(PERSON, 1)
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 3, 20)

    queue = (await client.get("/router/v1/status")).json()["queue"]["text"]
    assert [(r["key"], r["class"], r["position"]) for r in queue] == [
        ("alice", "interactive", 1),
        ("nightly", "batch", 2),
        ("nightly", "batch", 3),
    ]
    answers = [await task for task in (running, person, *batch)]
    assert [a.status_code for a in answers] == [200] * 4
    waits = [float(a.headers["X-Tensors-Queue-Wait-Ms"]) for a in answers]
    assert waits[1] < min(waits[2:])  # the person, though last, waited least
