"""Reliability matrix R15-R18: swapping models on one lane without losing or hanging requests.

A real router on a real socket (tests/support/harness.py), fake backends launched through the real
supervisor. Each test is named after its matrix row and ends with no backend process left.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from router.runtime import RuntimeState
from tests.support.harness import RouterHarness, SseEvent, chat, stream_chat

CHAT = "/v1/chat/completions"


async def _post(client: httpx.AsyncClient, body: dict) -> tuple[httpx.Response, float]:
    r = await client.post(CHAT, json=body)
    return r, time.monotonic()


def _tokens(events: list[SseEvent]) -> int:
    return sum(1 for e in events if '"content": "tok' in e.data)


def _no_stuck_state(harness: RouterHarness) -> None:
    states = {rt.state for rt in harness.runtimes.runtimes()}
    assert RuntimeState.LOADING not in states and RuntimeState.STOPPING not in states, states


async def test_r15_running_stream_drains_before_the_swap(harness: RouterHarness) -> None:
    n, rate = 15, 10  # A streams for ~1.5 s
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = f"--token-rate {rate}"
    client = await harness.start(harness.settings(stop_grace=1))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200

    first_token = asyncio.Event()
    a_events: list[SseEvent] = []

    async def stream_a() -> float:
        body = chat("chat-a", stream=True, max_tokens=n)
        async with client.stream("POST", CHAT, json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if '"content": "tok' in line:
                    first_token.set()
                a_events.append(SseEvent("message", line, time.monotonic()))
        return time.monotonic()

    a_task = asyncio.create_task(stream_a())
    await asyncio.wait_for(first_token.wait(), 10)
    b_sent = time.monotonic()
    b_response, b_done = await _post(client, chat("chat-b", max_tokens=1))
    a_done = await a_task
    # A finished intact: every token and the [DONE] marker, no error event.
    assert sum('"content": "tok' in e.data for e in a_events) == n
    assert a_events[-2].data == "data: [DONE]" or a_events[-1].data == "data: [DONE]"
    assert not any(e.data.startswith("event: error") for e in a_events)
    # B was served after A ended, by B's own backend; its wait covered A's remaining time.
    assert b_response.status_code == 200, b_response.text
    assert b_response.headers["x-fake-model"].endswith("chat-b.gguf")
    assert b_done > a_done
    remaining = a_done - b_sent
    assert remaining > 0.8, f"A had {remaining:.2f}s left when B arrived"
    assert b_done - a_done < 3.0, "B should start right after A drained (stop + load only)"
    assert harness.runtimes.spawn_count == 2


async def test_r16_failed_load_of_b_leaves_a_serving(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults_for_model["chat-b"] = "--exit-at-start 1"
    client = await harness.start(harness.settings(stop_grace=1))
    r = await client.post(CHAT, json=chat("chat-a"))
    assert r.status_code == 200, r.text
    # Three clients ask for B at once: one load attempt, every client gets its error.
    replies = await asyncio.gather(*(client.post(CHAT, json=chat("chat-b")) for _ in range(3)))
    for reply in replies:
        assert reply.status_code == 502, reply.text
        assert "failed to load model" in reply.json()["error"]["message"]
    assert harness.runtimes.spawn_count == 2
    _no_stuck_state(harness)
    assert harness.runtimes.status_of("chat-b") == "unloaded"
    # A serves again on the next request (relaunched: B's attempt took the lane).
    r = await client.post(CHAT, json=chat("chat-a"))
    assert r.status_code == 200, r.text
    assert r.headers["x-fake-model"].endswith("chat-a.gguf")
    assert harness.runtimes.status_of("chat-a") == "ready"
    status = (await client.get("/router/v1/status")).json()
    assert [rt["model"] for rt in status["runtimes"]] == ["chat-a"]
    assert status["queued"]["text"] == 0


async def test_r17_batching_limits_swaps(harness: RouterHarness) -> None:
    for m in ("chat-a", "chat-b", "chat-c"):
        harness.model(m)
    harness.faults["llamacpp"] = "--token-rate 20"
    client = await harness.start(harness.settings(stop_grace=1, max_batch_wait=5))
    order = ["chat-a", "chat-b", "chat-a", "chat-a", "chat-c", "chat-a", "chat-b"]

    async def one(i: int, model: str) -> tuple[str, httpx.Response]:
        await asyncio.sleep(0.05 * i)  # arrive in this order, one every 50 ms
        return model, await client.post(CHAT, json=chat(model, max_tokens=4))

    started = time.monotonic()
    results = await asyncio.gather(*(one(i, m) for i, m in enumerate(order)))
    for model, r in results:
        assert r.status_code == 200, r.text
        assert r.headers["x-fake-model"].endswith(f"{model}.gguf")
    # FIFO would load 6 times (A B A C A B); batching serves each model's queue together.
    assert harness.runtimes.spawn_count <= 3, f"{harness.runtimes.spawn_count} loads"
    assert time.monotonic() - started < 10


async def test_r17_waiting_model_is_not_starved_beyond_max_batch_wait(
    harness: RouterHarness,
) -> None:
    max_wait = 1.0
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = "--token-rate 20"
    # The window alone must end the batch here, not the bypass bound (tests/runtime/test_grouped_queue.py).
    settings = harness.settings(stop_grace=1, max_batch_wait=max_wait, max_bypass=1000)
    client = await harness.start(settings)
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    stop = asyncio.Event()
    a_statuses: list[int] = []

    async def keep_a_busy(offset: float) -> None:  # A back to back, ~0.2 s each
        await asyncio.sleep(offset)
        while not stop.is_set():
            r = await client.post(CHAT, json=chat("chat-a", max_tokens=4))
            a_statuses.append(r.status_code)

    # Two staggered clients: A always holds a lease, so only the batch window can end it (an
    # idle lane with only other-model waiters swaps at once, by design).
    busy = [asyncio.create_task(keep_a_busy(offset)) for offset in (0.0, 0.1)]
    await asyncio.sleep(0.3)
    b_sent = time.monotonic()
    r = await client.post(CHAT, json=chat("chat-b", max_tokens=1))
    b_wait = time.monotonic() - b_sent
    stop.set()
    await asyncio.gather(*busy)
    assert r.status_code == 200, r.text
    # max_batch_wait, then A's in-flight request (0.2 s), then stop A and load B.
    assert b_wait < max_wait + 2.5, f"B waited {b_wait:.2f}s"
    assert b_wait >= max_wait - 0.1, "A's queue should have been served first (batching)"
    assert set(a_statuses) == {200}


async def test_r17_expired_batch_window_does_not_livelock_the_swap(
    harness: RouterHarness,
) -> None:
    """B queues behind A's stream, then A is asked for again. By the time B's backend is ready
    A's waiter is past max_batch_wait; B must still serve the request it was loaded for
    (regression: B was stopped unused and reloaded for ever)."""
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = "--token-rate 10"
    client = await harness.start(harness.settings(stop_grace=1, max_batch_wait=0.3))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    a_long = asyncio.create_task(stream_chat(client, chat("chat-a", stream=True, max_tokens=8)))
    await asyncio.sleep(0.3)
    b = asyncio.create_task(client.post(CHAT, json=chat("chat-b", max_tokens=1), timeout=8))
    await asyncio.sleep(0.05)
    a = asyncio.create_task(client.post(CHAT, json=chat("chat-a", max_tokens=1), timeout=8))
    assert (await a_long)[0] == 200
    assert (await b).status_code == 200
    assert (await a).status_code == 200
    # A, B (A's second request may be batched onto the first A): never a reload loop.
    assert harness.runtimes.spawn_count <= 3


async def test_r18_requests_during_a_swap_get_answers_or_503(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = "--token-rate 10"
    client = await harness.start(harness.settings(stop_grace=1, max_queue=3, max_batch_wait=0))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    a_long = asyncio.create_task(stream_chat(client, chat("chat-a", stream=True, max_tokens=8)))
    await asyncio.sleep(0.3)
    # B arrives: A drains. During the drain and B's load, more requests for both models.
    mixed = ["chat-b", "chat-a", "chat-b", "chat-a", "chat-a", "chat-b", "chat-a", "chat-b"]

    async def one(i: int, model: str) -> httpx.Response:
        await asyncio.sleep(0.02 * i)
        return await client.post(CHAT, json=chat(model, max_tokens=2), timeout=10)

    replies = await asyncio.gather(*(one(i, m) for i, m in enumerate(mixed)))
    status, events = await a_long
    assert status == 200 and events[-1].data == "[DONE]"
    codes = [r.status_code for r in replies]
    assert set(codes) <= {200, 503}, codes
    assert 200 in codes and 503 in codes, codes  # max_queue 3 with 8 arrivals
    for model, reply in zip(mixed, replies, strict=True):
        body = reply.json()  # never an empty body
        if reply.status_code == 503:
            assert int(reply.headers["retry-after"]) >= 1
            assert body["error"]["message"]
        else:
            assert reply.headers["x-fake-model"].endswith(f"{model}.gguf")
    _no_stuck_state(harness)
    # After the storm both models still answer.
    for model in ("chat-b", "chat-a"):
        r = await client.post(CHAT, json=chat(model, max_tokens=1))
        assert r.status_code == 200, r.text


async def test_r18_no_resets_while_a_swap_stops_the_old_backend(harness: RouterHarness) -> None:
    """Every request sent while A is being stopped (slow SIGTERM) and B loads completes."""
    harness.model("chat-a")
    harness.model("chat-b")
    harness.faults["llamacpp"] = "--sigterm-delay 0.5"
    client = await harness.start(harness.settings(stop_grace=2))
    assert (await client.post(CHAT, json=chat("chat-a"))).status_code == 200
    replies = await asyncio.gather(
        *(client.post(CHAT, json=chat(m)) for m in ["chat-b", "chat-a"] * 4)
    )
    for r in replies:
        assert r.status_code == 200, r.text
        assert json.loads(r.text)["choices"]
