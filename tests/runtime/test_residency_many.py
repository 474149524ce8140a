"""Several runtimes per lane (`runtime.residency: memory`, issue 25), with the fake backend.

Model files are sparse files of a chosen size, so the estimates are known; the host budget is
set from the router's own estimates, so the arithmetic holds on any machine.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx
import pytest

from router.appkeys import CATALOG, EVENTS
from router.domain import Lane
from router.runtime.state import spec_for
from tests.support.bus_wait import after_events
from tests.support.harness import RouterHarness, chat, stream_chat
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("no_measurement")

MIB = 1 << 20


def _models(harness: RouterHarness, sizes: dict[str, int]) -> None:
    for model_id, size in sizes.items():
        harness.model(model_id)
        os.truncate(harness.models_dir / f"{model_id}.gguf", size)


async def _start(harness: RouterHarness, fit: list[str] | None = None, **runtime: Any) -> Any:
    """Start with a host budget that holds exactly the models in `fit` (all: unbounded)."""
    base = harness.settings(residency="memory", **runtime)
    if fit is None:
        return await harness.start(base)
    await harness.start(base)
    assert harness.app is not None
    catalog = harness.app[CATALOG]
    book = harness.runtimes._book
    need = sum(book.estimate(spec_for(catalog.require(m), Lane.TEXT)).devices["host"] for m in fit)
    await harness.close()
    memory = base.memory.model_copy(update={"host_budget": need, "reserve": 0})
    return await harness.start(base.model_copy(update={"memory": memory}))


def _resident(harness: RouterHarness) -> set[str]:
    return {v.config.id for v in harness.runtimes.views() if v.state.value in ("loading", "ready")}


async def _ask(client: httpx.AsyncClient, model: str, **extra: Any) -> dict[str, Any]:
    r = await client.post("/v1/chat/completions", json=chat(model, max_tokens=4, **extra))
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def test_two_that_fit_stay_resident_through_alternating_requests(
    harness: RouterHarness,
) -> None:
    _models(harness, {"chat-a": 4 * MIB, "chat-b": 4 * MIB})
    client = await _start(harness, fit=["chat-a", "chat-b"])
    for i in range(20):
        await _ask(client, "chat-a" if i % 2 == 0 else "chat-b")
    assert harness.runtimes.spawn_count == 2  # two loads in all
    assert _resident(harness) == {"chat-a", "chat-b"}


async def test_a_third_evicts_the_cheaper_and_the_dry_run_named_it(
    harness: RouterHarness,
) -> None:
    _models(harness, {"chat-a": 4 * MIB, "chat-b": 4 * MIB, "chat-c": 4 * MIB})
    client = await _start(harness, fit=["chat-a", "chat-b"])
    for model in ("chat-a", "chat-b", "chat-a", "chat-a"):  # chat-b is the cheaper to reload
        await _ask(client, model)
    plan = (await client.post("/router/v1/load", json={"model": "chat-c", "dry_run": True})).json()
    assert [v["model"] for v in plan["evict"]] == ["chat-b"] and plan["wait"] == "none"
    assert harness.runtimes.spawn_count == 2
    await _ask(client, "chat-c")
    assert _resident(harness) == {"chat-a", "chat-c"}
    assert harness.runtimes.spawn_count == 3


async def test_a_busy_victim_finishes_its_stream_before_it_stops(harness: RouterHarness) -> None:
    gate = harness.tmp / "gate"
    harness.faults_for_model["chat-b"] = f"--gate {gate}"
    _models(harness, {"chat-a": 4 * MIB, "chat-b": 4 * MIB})
    client = await _start(harness, fit=["chat-a"], max_batch_wait=0)
    bus = harness.app[EVENTS]
    assert (await client.post("/router/v1/load", json={"model": "chat-b"})).status_code == 200
    # The gate holds chat-b's generation: the stream is running (leased) until it opens.
    stream = asyncio.create_task(stream_chat(client, chat("chat-b", stream=True, max_tokens=16)))
    assert await after_events(bus, lambda: harness.runtimes.views()[0].leases == 1)
    load = asyncio.create_task(_ask(client, "chat-a"))  # needs chat-b gone: it drains
    assert await after_events(bus, lambda: harness.runtimes.views()[0].draining)
    assert not load.done() and _resident(harness) == {"chat-b"}
    gate.touch()
    status, events = await stream
    assert status == 200
    text = "".join(
        c["delta"].get("content") or ""
        for e in events
        if e.data != "[DONE]"
        for c in json.loads(e.data)["choices"]
    )
    assert text.count("tok") == 16 and events[-1].data == "[DONE]"  # intact
    await load
    assert _resident(harness) == {"chat-a"}


async def test_a_request_without_a_model_goes_to_the_most_recently_used(
    harness: RouterHarness,
) -> None:
    _models(harness, {"chat-a": 4 * MIB, "chat-b": 4 * MIB})
    client = await _start(harness)
    uses = harness.runtimes._book.uses

    async def unnamed() -> None:  # llama-server's own /completion takes no model
        r = await client.post("/completion", json={"prompt": "hi", "n_predict": 2})
        assert r.status_code == 200, r.text

    await _ask(client, "chat-a")
    await _ask(client, "chat-b")
    await unnamed()
    assert (uses.recent("chat-a@text"), uses.recent("chat-b@text")) == (1, 2)
    await _ask(client, "chat-a")
    await unnamed()
    assert (uses.recent("chat-a@text"), uses.recent("chat-b@text")) == (3, 2)
    assert harness.runtimes.spawn_count == 2


async def test_unload_a_lane_stops_every_runtime_in_it(harness: RouterHarness) -> None:
    _models(harness, {"chat-a": 4 * MIB, "chat-b": 4 * MIB})
    client = await _start(harness)
    await _ask(client, "chat-a")
    await _ask(client, "chat-b")
    r = await client.post("/router/v1/unload", json={"target": "text"})
    assert r.status_code == 200 and len(r.json()["unloaded"]) == 2
    assert _resident(harness) == set()


async def test_a_stopping_victim_keeps_its_bytes_until_it_exited(harness: RouterHarness) -> None:
    harness.faults_for_model["chat-b"] = "--sigterm-delay 1.5"  # a slow exit
    _models(harness, {"chat-a": 4 * MIB, "chat-b": 4 * MIB})
    client = await _start(harness, fit=["chat-a"])
    assert (await client.post("/router/v1/load", json={"model": "chat-b"})).status_code == 200
    ask = asyncio.create_task(_ask(client, "chat-a"))  # chat-b must go first
    assert await after_events(
        harness.app[EVENTS], lambda: harness.runtimes.views()[0].state.value == "stopping"
    )
    status = (await client.get("/router/v1/status")).json()
    (stopping,) = status["runtimes"]
    assert stopping["model"] == "chat-b" and stopping["memory"]["bytes"] > 0
    (host,) = [d for d in status["devices"] if d["device"] == "host"]
    assert host["used"] == stopping["memory"]["bytes"]  # still counted
    assert harness.runtimes.spawn_count == 1 and not ask.done()  # chat-a waits for the exit
    await ask
    assert _resident(harness) == {"chat-a"} and harness.runtimes.spawn_count == 2
