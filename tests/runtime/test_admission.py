"""Reliability matrix R19: a per-model in-flight cap and a queue cap, against a real router.

30 concurrent requests meet a model capped at 2 in flight with 8 queue places: 10 are served
(never more than 2 at once), 20 are refused at once with 503 and `Retry-After`; queued requests
still obey `runtime.queue_timeout`.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from router.domain import Lane
from tests.support.harness import RouterHarness, chat, wait_for

CHAT = "/v1/chat/completions"


async def _timed(client: httpx.AsyncClient, model: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    reply = await client.post(CHAT, json=chat(model, max_tokens=1), timeout=30)
    return reply, time.monotonic() - started


async def test_r19_in_flight_cap_2_and_queue_cap_8_under_30_requests(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    gate = harness.tmp / "gate"
    # Generations wait for the gate, then hold their lease 0.4 s: the split into 2 running,
    # 8 queued and 20 refused is decided while nothing can finish, however slowly the 30
    # requests arrive on a busy machine (it used to need all 30 within the first 0.4 s).
    harness.faults["llamacpp"] = f"--ttft 0.4 --gate {gate}"
    client = await harness.start(harness.settings(max_in_flight=2, max_queue=8))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max([peak, *(rt.leases for rt in harness.runtimes.runtimes())])
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        tasks = [asyncio.create_task(_timed(client, "chat-a")) for _ in range(30)]
        assert await wait_for(lambda: sum(t.done() for t in tasks) >= 20, 20)
        (runtime,) = harness.runtimes.runtimes()
        assert runtime.leases == 2 and harness.runtimes.queue_length(Lane.TEXT) == 8
        refused_first = [t.result() for t in tasks if t.done()]
        opened = time.monotonic()
        gate.touch()
        results = await asyncio.gather(*tasks)
        finished = time.monotonic()
    finally:
        watcher.cancel()
    served = [(r, t) for r, t in results if r.status_code == 200]
    refused = [(r, t) for r, t in results if r.status_code == 503]
    assert (len(served), len(refused)) == (10, 20), [r.status_code for r, _ in results]
    assert [r.status_code for r, _ in refused_first] == [503] * 20  # all before any answer
    assert peak == 2  # the cap was reached and never passed
    # Ten requests two at a time, 0.4 s each: the last one finishes five rounds after the gate.
    assert finished - opened >= 1.9
    for reply, elapsed in refused:
        assert int(reply.headers["retry-after"]) >= 1
        assert "queue is full" in reply.json()["error"]["message"]
        assert elapsed < 1.0  # refused at once, not after waiting (the matrix asks < 50 ms)
    r = await client.post(CHAT, json=chat("chat-a", max_tokens=1))
    assert r.status_code == 200, r.text


async def test_r19_queued_requests_obey_the_queue_timeout(harness: RouterHarness) -> None:
    harness.model("chat-a")
    gate = harness.tmp / "gate"
    # The generation waits for the gate: both refusals must come while it is closed (from
    # the queue timeout, not the backend finishing), however slowly a busy machine runs.
    harness.faults["llamacpp"] = f"--gate {gate}"
    client = await harness.start(harness.settings(max_in_flight=1, max_queue=8, queue_timeout=0.5))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    tasks = [asyncio.create_task(_timed(client, "chat-a")) for _ in range(3)]
    assert await wait_for(lambda: sum(t.done() for t in tasks) >= 2, 20)
    refused = [t.result() for t in tasks if t.done()]
    gate.touch()
    results = await asyncio.gather(*tasks)
    codes = sorted(r.status_code for r, _ in results)
    assert codes == [200, 503, 503], codes
    assert [r.status_code for r, _ in refused] == [503, 503]  # before the backend answered
    for reply, elapsed in refused:
        assert "runtime.queue_timeout" in reply.json()["error"]["message"]
        assert elapsed >= 0.4  # not before the queue timeout
        assert int(reply.headers["retry-after"]) >= 1


async def test_no_cap_by_default_lets_every_request_through(harness: RouterHarness) -> None:
    harness.model("chat-a")
    gate = harness.tmp / "gate"
    harness.faults["llamacpp"] = f"--gate {gate}"
    client = await harness.start(harness.settings(max_queue=2))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    tasks = [asyncio.create_task(_timed(client, "chat-a")) for _ in range(12)]
    (runtime,) = harness.runtimes.runtimes()
    # All twelve hold a lease at once while the backend holds every generation: none was
    # queued behind another (an event, not a wall-clock bound on a busy machine).
    assert await wait_for(lambda: runtime.leases == 12, 20), runtime.leases
    assert harness.runtimes.queue_length(Lane.TEXT) == 0
    gate.touch()
    results = await asyncio.gather(*tasks)
    assert all(r.status_code == 200 for r, _ in results)
