"""Runtime + proxy through the real supervisor with fake backends: the core path."""

from __future__ import annotations

import asyncio

from tests.support.harness import RouterHarness, chat


async def test_chat_loads_on_demand_and_answers(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "chat-a"
    assert body["choices"][0]["message"]["content"]
    assert "X-Router-Overhead-Ms" in r.headers
    assert harness.runtimes.status_of("chat-a") == "ready"


async def test_r11_twenty_concurrent_cold_requests_spawn_once(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    replies = await asyncio.gather(
        *(client.post("/v1/chat/completions", json=chat("chat-a")) for _ in range(20))
    )
    assert [r.status_code for r in replies] == [200] * 20
    assert harness.runtimes.spawn_count == 1


async def test_streamed_chat_passes_events_and_headers(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    async with client.stream("POST", "/v1/chat/completions", json=chat("chat-a", stream=True)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-accel-buffering"] == "no"
        assert r.headers["cache-control"] == "no-cache"
        text = "".join([chunk async for chunk in r.aiter_text()])
    assert text.rstrip().endswith("data: [DONE]")
    assert '"model": "chat-a"' in text or '"model":"chat-a"' in text


async def test_swap_between_two_models(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.model("chat-b")
    client = await harness.start()
    for model in ("chat-a", "chat-b", "chat-a"):
        r = await client.post("/v1/chat/completions", json=chat(model))
        assert r.status_code == 200, r.text
        assert r.headers["x-fake-model"].endswith(f"{model}.gguf")
    assert harness.runtimes.spawn_count == 3
