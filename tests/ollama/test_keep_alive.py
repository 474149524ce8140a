"""Ollama's keep_alive through the router, with the official `ollama` client (issue 23): the
unload request unloads and never loads, keep_alive sets the runtime's idle deadline, and no
deadline cuts work in flight. Fake llama-server processes under the real supervisor."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.errors import BadRequest
from router.ollama.keep_alive import parse_keep_alive
from tests.support.harness import RouterHarness, wait_for
from tests.support.ollama import client_for


@pytest.fixture
async def harness(harness: RouterHarness) -> RouterHarness:
    """The root harness with this module's models."""
    h = harness
    h.model("chat-a")
    h.model("chat-b")
    h.model("embed", embeddingsmodel="embed.gguf")
    return h


def status(h: RouterHarness, model: str) -> str:
    return h.runtimes.status_of(model)


# ---- the pure parser ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (0, 0.0),
        ("0", 0.0),
        (30, 30.0),
        (1.5, 1.5),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        (-1, math.inf),
        ("-1m", math.inf),
        ("-1", None),  # Go's ParseDuration wants a unit: refused below
    ],
)
def test_parse_keep_alive(value: object, seconds: float | None) -> None:
    if value == "-1":
        with pytest.raises(BadRequest):
            parse_keep_alive(value)
        return
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["5", "five minutes", "", "m", True, [1], {"s": 1}, math.nan])
def test_parse_keep_alive_refuses(value: object) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_keep_alive(value)
    assert caught.value.param == "keep_alive"


@given(st.integers(0, 10**6), st.sampled_from(["h", "m", "s", "ms"]))
def test_parse_keep_alive_units(n: int, unit: str) -> None:
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}[unit]
    assert parse_keep_alive(f"{n}{unit}") == pytest.approx(n * scale)
    assert parse_keep_alive(f"-{n}{unit}") == (math.inf if n else 0.0)


# ---- through the router --------------------------------------------------------------------


async def test_unload_request_unloads_a_running_model(harness: RouterHarness) -> None:
    await harness.start()
    client = client_for(harness)
    reply = await client.generate(model="chat-a", prompt="hi", stream=False)
    assert reply.done and status(harness, "chat-a") == "ready"
    reply = await client.generate(model="chat-a", keep_alive=0)
    assert reply.done_reason == "unload" and reply.response == ""
    assert status(harness, "chat-a") == "unloaded"
    assert (await client.ps()).models == []
    assert harness.runtimes.spawn_count == 1


async def test_unload_request_never_loads_nor_evicts(harness: RouterHarness) -> None:
    await harness.start()
    client = client_for(harness)
    await client.chat(model="chat-b", messages=[{"role": "user", "content": "hi"}])
    assert status(harness, "chat-b") == "ready"
    reply = await client.chat(model="chat-a", messages=[], keep_alive=0)
    assert reply.done_reason == "unload" and reply.message.content == ""
    assert status(harness, "chat-a") == "unloaded"
    assert status(harness, "chat-b") == "ready", "the unload of chat-a evicted chat-b"
    assert harness.runtimes.spawn_count == 1
    # The same on /api/embed: nothing to embed and keep_alive 0 unloads, never loads.
    embedded = await client.embed(model="embed", input=[], keep_alive=0)
    assert embedded.embeddings == [] and status(harness, "embed") == "unloaded"


async def test_empty_request_without_keep_alive_loads(harness: RouterHarness) -> None:
    await harness.start()
    reply = await client_for(harness).generate(model="chat-a")
    assert reply.done_reason == "load" and status(harness, "chat-a") == "ready"


async def test_keep_alive_zero_unloads_after_the_answer(harness: RouterHarness) -> None:
    await harness.start()
    client = client_for(harness)
    reply = await client.chat(
        model="chat-a", messages=[{"role": "user", "content": "hi"}], keep_alive=0
    )
    assert reply.message.content
    assert await wait_for(lambda: status(harness, "chat-a") == "unloaded", 5)
    # A duration string of zero is the same.
    await client.embed(model="embed", input="x", keep_alive="0s")
    assert await wait_for(lambda: status(harness, "embed") == "unloaded", 5)


async def test_keep_alive_sets_the_idle_deadline(harness: RouterHarness) -> None:
    await harness.start()  # runtime.idle_unload 0: kept until unloaded by default
    client = client_for(harness)
    await client.generate(model="chat-a", prompt="hi")
    ps = (await client.ps()).models
    assert ps[0].expires_at is not None and ps[0].expires_at.year > 2200  # kept
    await client.generate(model="chat-a", prompt="hi", keep_alive="1s")
    released = time.time()
    assert await wait_for(lambda: harness.runtimes.views()[0].idle_deadline is not None)
    (view,) = harness.runtimes.views()
    assert view.keep_alive == 1.0
    assert view.idle_deadline is not None and abs(view.idle_deadline - (released + 1)) < 0.5
    ps = (await client.ps()).models
    assert ps[0].expires_at is not None
    assert abs(ps[0].expires_at.timestamp() - view.idle_deadline) < 0.01
    # A request that names no keep_alive keeps the runtime's (Ollama's rule).
    await client.generate(model="chat-a", prompt="hi")
    assert harness.runtimes.views()[0].keep_alive == 1.0
    assert await wait_for(lambda: status(harness, "chat-a") == "unloaded", 5)


async def test_negative_keep_alive_outlives_the_idle_setting(harness: RouterHarness) -> None:
    await harness.start(harness.settings(idle_unload=0.3))
    client = client_for(harness)
    await client.generate(model="chat-a", prompt="hi", keep_alive=-1)
    await client.generate(model="chat-b", prompt="hi")  # another lane holder: a swap
    assert await wait_for(lambda: status(harness, "chat-b") == "ready", 5)
    await asyncio.sleep(0.8)
    assert status(harness, "chat-b") == "unloaded"  # the router's 0.3 s applies
    await client.generate(model="chat-a", prompt="hi", keep_alive=-1)
    await asyncio.sleep(0.8)
    (view,) = harness.runtimes.views()
    assert view.config.id == "chat-a" and view.ready
    assert view.keep_alive == math.inf and view.idle_deadline is None


async def test_unload_waits_for_work_in_flight(harness: RouterHarness) -> None:
    harness.faults["llamacpp"] = "--token-rate 10"
    await harness.start()
    client = client_for(harness)
    stream = await client.generate(
        model="chat-a", prompt="hi", stream=True, options={"num_predict": 8}
    )
    first = await anext(stream)  # running: the model is leased
    unload = asyncio.create_task(client.generate(model="chat-a", keep_alive=0))
    parts = [first] + [part async for part in stream]
    assert parts[-1].done and parts[-1].done_reason in ("stop", "length"), "work was cut"
    reply = await asyncio.wait_for(unload, 10)
    assert reply.done_reason == "unload" and status(harness, "chat-a") == "unloaded"


async def test_bad_keep_alive_is_refused_in_ollama_shape(harness: RouterHarness) -> None:
    client = await harness.start()
    r = await client.post("/api/chat", json={"model": "chat-a", "keep_alive": "soon"})
    assert r.status_code == 400 and "keep_alive" in r.json()["error"]
    assert harness.runtimes.spawn_count == 0


async def test_unload_request_in_pieces_without_a_json_type(harness: RouterHarness) -> None:
    """As a network delivers it: three writes with pauses, Ollama's curl content type."""
    client = await harness.start()
    await client_for(harness).generate(model="chat-a", prompt="hi")
    body = json.dumps({"model": "chat-a", "keep_alive": 0}).encode()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 9):
            await asyncio.sleep(0.1)
            yield body[i : i + 9]

    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    r = await client.post("/api/generate", content=pieces(), headers=headers)
    assert r.status_code == 200 and r.json()["done_reason"] == "unload"
    assert status(harness, "chat-a") == "unloaded"
