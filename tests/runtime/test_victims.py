"""A load's victims over the fake backend, in both residency modes (one runtime per lane: the
occupant is every other load's forced victim; several: the memory plan's victims, room for one).

Test-audit section 7: a runtime that stops being a victim leaves its drain, and a pending load
that nobody waits for any more is dropped (no load)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.harness import RouterHarness, chat, stream_chat
from tests.support.residency import (
    no_measurement,  # noqa: F401 (a fixture)
    sized_models,
    start_with_room,
)

pytestmark = pytest.mark.usefixtures("no_measurement")

CHAT = "/v1/chat/completions"
MIB = 1 << 20


async def _start(harness: RouterHarness, residency: str, **runtime: Any) -> Any:
    sized_models(harness, {"chat-a": 4 * MIB, "chat-b": 4 * MIB})
    harness.faults["llamacpp"] = "--token-rate 10"
    if residency == "memory":
        return await start_with_room(harness, fit=["chat-a"], **runtime)
    return await harness.start(harness.settings(residency="lane", **runtime))


@pytest.mark.parametrize("residency", ["lane", "memory"])
async def test_an_abandoned_load_lets_its_victim_serve_again_and_loads_nothing(
    harness: RouterHarness, residency: str
) -> None:
    client = await _start(harness, residency, queue_timeout=1.0, max_batch_wait=0.2, stop_grace=1)
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    started = asyncio.Event()
    body = chat("chat-a", stream=True, max_tokens=60)  # about 6 s at 10 tokens/s
    stream = asyncio.create_task(stream_chat(client, body, started))
    await asyncio.wait_for(started.wait(), 10)
    # chat-b needs chat-a gone: chat-a drains (its window is 0.2 s), then b's only request
    # gives up after queue_timeout, before chat-a's stream ends.
    b = await client.post(CHAT, json=chat("chat-b", max_tokens=1))
    assert b.status_code == 503, b.text
    loads = harness.runtimes.spawn_count
    # Nobody waits for chat-b any more: chat-a is no victim, so it leaves its drain and
    # serves a new request at once, while its stream still runs.
    a = await client.post(CHAT, json=chat("chat-a", max_tokens=1))
    assert a.status_code == 200, a.text
    assert not stream.done()
    status, _ = await stream
    assert status == 200
    assert harness.runtimes.spawn_count == loads == 1  # chat-b never loaded, chat-a not again
    assert [v.config.id for v in harness.runtimes.views()] == ["chat-a"]
