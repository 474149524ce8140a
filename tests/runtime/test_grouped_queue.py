"""Issue 26: the grouped queue against FIFO on a real router with real (fake) backends.

Two clients share the text lane, which holds one model: one asks for chat-a, the other for
chat-b, each sending a request every GAP seconds (agents that do not wait for each other), so
the arrivals alternate A, B, A, B. Strict FIFO swaps on nearly every request; grouped keeps
serving the loaded model's requests until the other model's oldest request has been passed
`max_bypass` times (or waited `max_batch_wait`). Loads are counted by the manager's spawn
counter; waits come from `X-Tensors-Queue-Wait-Ms`.
"""

from __future__ import annotations

import asyncio

import httpx

from router.edge.queue_wait import HEADER
from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"
PER_CLIENT = 8
GAP = 0.1  # s between one client's requests; the other client is half a gap later
MAX_BATCH_WAIT = 5.0


async def _one(client: httpx.AsyncClient, at: float, model: str) -> float:
    await asyncio.sleep(at)  # the workload's arrival schedule, not a wait for an outcome
    r = await client.post(CHAT, json=chat(model, max_tokens=2))
    assert r.status_code == 200, r.text
    assert r.headers["x-fake-model"].endswith(f"{model}.gguf")
    return float(r.headers[HEADER]) / 1000.0


async def _run(harness: RouterHarness, order: str) -> tuple[int, list[float]]:
    """Both clients to the end under `order`: (loads, every request's queue wait in s)."""
    settings = harness.settings(stop_grace=1, queue_order=order, max_batch_wait=MAX_BATCH_WAIT)
    client = await harness.start(settings)
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    loads_before = harness.runtimes.spawn_count
    arrivals = [(i * GAP + half, m) for i in range(PER_CLIENT) for half, m in SCHEDULE]
    waits = await asyncio.gather(*(_one(client, at, m) for at, m in arrivals))
    loads = harness.runtimes.spawn_count - loads_before
    await harness.close()
    return loads, list(waits)


SCHEDULE = ((0.0, "chat-a"), (GAP / 2, "chat-b"))


async def test_grouped_makes_at_most_a_third_of_fifos_loads(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = "--token-rate 50"
    fifo_loads, fifo_waits = await _run(harness, "fifo")
    grouped_loads, grouped_waits = await _run(harness, "grouped")
    assert len(fifo_waits) == len(grouped_waits) == 2 * PER_CLIENT
    # FIFO: the two clients take turns, so most requests need a swap (how many exactly depends
    # on arrival jitter on a busy machine: 13 of 16 was seen with two suites at once); the
    # property is the ratio below.
    assert fifo_loads >= 2 * PER_CLIENT - 4, fifo_loads
    assert grouped_loads * 3 <= fifo_loads, (grouped_loads, fifo_loads)
    # The bound: no request waits longer than under FIFO plus the batch window.
    assert max(grouped_waits) <= max(fifo_waits) + MAX_BATCH_WAIT, (grouped_waits, fifo_waits)


async def test_answers_say_how_long_they_waited(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start(harness.settings(stop_grace=1))
    cold = await client.post(CHAT, json=chat("chat-a", max_tokens=1))  # waits for the load
    warm = await client.post(CHAT, json=chat("chat-a", max_tokens=1))  # granted at once
    assert cold.status_code == warm.status_code == 200
    assert int(cold.headers[HEADER]) > 0
    assert warm.headers[HEADER] == "0"
    status = await client.get("/router/v1/status")
    assert HEADER not in status.headers  # never queued
