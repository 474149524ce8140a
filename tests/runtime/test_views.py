"""The runtime owner's read API and its state moves: snapshots (`views`, `is_serving`), one
event per move that really happened, explicit loads' own wait bound, and the scrape-time
gauges read from the snapshots.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from router.backend_client import BackendClient
from router.config import ModelConfig, Settings
from router.domain import Lane
from router.records import EventBus
from router.runtime import Loader, Runtime, RuntimeManager, RuntimeState, spec_for
from tests.support.configs import text_config
from tests.support.harness import RouterHarness, chat


async def _until(condition: Callable[[], bool], bound: float = 20.0) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_views_and_is_serving_follow_a_runtime_through_its_life(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    manager = harness.runtimes
    (view,) = manager.views()
    assert (view.key, view.lane, view.occupies) == ("chat-a@text", Lane.TEXT, {Lane.TEXT})
    assert view.state is RuntimeState.READY and view.active and not view.draining
    assert view.pid and view.port and view.base_url.endswith(f":{view.port}")
    (runtime,) = manager.runtimes()
    assert manager.is_serving(runtime) and manager.is_serving(runtime, new_work=True)
    r = await client.post("/router/v1/unload", json={"target": "text"})
    assert r.status_code == 200
    assert manager.views() == ()
    assert not manager.is_serving(runtime)
    assert view.state is RuntimeState.READY  # a snapshot does not change under the reader


async def test_explicit_load_is_bounded_by_the_load_not_the_queue_timeout(
    harness: RouterHarness,
) -> None:
    """An explicit load that takes longer than runtime.queue_timeout still answers ready; a
    request still obeys queue_timeout."""
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--startup-delay 1.5"
    client = await harness.start(harness.settings(queue_timeout=0.3))
    r = await client.post("/router/v1/load", json={"model": "chat-a"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"
    await client.post("/router/v1/unload", json={"target": "text"})
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 503 and "runtime.queue_timeout" in r.json()["error"]["message"]


async def test_a_kobold_request_counts_once_in_the_in_flight_gauge(harness: RouterHarness) -> None:
    """Under the runtime's primary lane (text), though the image lane started it."""
    harness.model("omni", mode="kobold", model_param="omni.gguf", sdmodel="omni.safetensors")
    harness.faults["kobold"] = "--ttft 3"
    client = await harness.start()
    r = await client.post("/router/v1/load", json={"model": "omni-omni"})
    assert r.status_code == 200, r.text
    (runtime,) = harness.runtimes.runtimes()
    assert runtime.spec.occupies == {Lane.TEXT, Lane.IMAGE} and runtime.spec.lane is Lane.IMAGE
    request = asyncio.create_task(client.post("/v1/chat/completions", json=chat("omni")))
    try:
        await _until(lambda: runtime.leases == 1)
        text = (await client.get("/metrics")).text
    finally:
        assert (await request).status_code == 200
    gauges = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tensor_router_in_flight{")
    }
    assert gauges["text"] == 1.0 and gauges["image"] == 0.0
    assert sum(gauges.values()) == 1.0
    assert 'tensor_router_queued{lane="text"} 0.0' in text


# ---- one step for a state change and its event (no processes) ---------------------------


def _config(tmp_path: Path) -> ModelConfig:
    return text_config(tmp_path)


async def test_a_move_that_did_not_happen_publishes_nothing(tmp_path: Path) -> None:
    settings = Settings.model_validate({"models": {"config_dir": tmp_path}})
    events = EventBus()
    seen: list[str] = []
    events.subscribe_callback(lambda event: seen.append(str(event["event"])))
    async with aiohttp.ClientSession() as session:
        manager = RuntimeManager(
            settings, Loader(settings, BackendClient(session), tmp_path), events
        )
        runtime = Runtime(spec_for(_config(tmp_path), Lane.TEXT))
        assert not manager._life.move(runtime, RuntimeState.STOPPED, "unloaded")
        assert manager._life.move(runtime, RuntimeState.FAILED, "failed", reason="x")
        assert not manager._life.begin_stop(runtime)  # a failed runtime is not stopped again
        await manager._life._finish_stop(runtime)  # nor reported unloaded
        assert seen == ["failed"] and runtime.state is RuntimeState.FAILED

        stopping = Runtime(spec_for(_config(tmp_path), Lane.TEXT))
        assert manager._life.move(stopping, RuntimeState.READY, "ready")
        assert manager._life.begin_stop(stopping)
        manager._life.fail_running(stopping, "exited")  # its exit is the stop, not a failure
        await asyncio.wait_for(stopping.gone.wait(), 10)
        await manager.close()
        assert seen == ["failed", "ready", "unloading", "unloaded"]
        assert stopping.state is RuntimeState.STOPPED
