"""Issue 26: vLLM sleep instead of stop (`router_sleep: 1`; docs/swaps.md, "vLLM sleep").

A real router on a real socket, fake vLLM backends through the real supervisor; the fake
answers vLLM's /sleep, /wake_up and /is_sleeping only when launched with
`--enable-sleep-mode` and `VLLM_SERVER_DEV_MODE=1`, and refuses inference while asleep with
vLLM's 503. The real vLLM needs CUDA or ROCm: this is the seam, not the backend.
"""

from __future__ import annotations

from typing import Any

import httpx

from router.appkeys import EVENTS
from router.runtime import RuntimeState
from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"


def _setup(h: RouterHarness) -> None:
    h.model("v-a", "vllm", model_param="v-a.safetensors", router_sleep=1)
    h.model("v-b", "vllm", model_param="v-b.safetensors")


def _watch(h: RouterHarness) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    wanted = {"sleeping", "vllm_sleep", "loading", "ready", "failed", "unloaded"}
    h.app[EVENTS].subscribe_callback(
        lambda e: seen.append(e) if e["event"] in wanted and e["model"] == "v-a" else None
    )
    return seen


async def _ok(client: httpx.AsyncClient, model: str) -> None:
    r = await client.post(CHAT, json=chat(model, max_tokens=2))
    assert r.status_code == 200, r.text


def _runtime(h: RouterHarness, model: str) -> Any:
    [rt] = [rt for rt in h.runtimes.runtimes() if rt.config.id == model]
    return rt


async def test_a_swap_puts_a_sleeper_to_sleep_and_a_return_wakes_it(harness: RouterHarness) -> None:
    h = harness
    _setup(h)
    client = await h.start(h.settings(stop_grace=2))
    events = _watch(h)
    await _ok(client, "v-a")
    a = _runtime(h, "v-a")
    pid, port = a.process.pid, a.port
    assert "--enable-sleep-mode" in a.argv
    spawned = h.runtimes.spawn_count

    await _ok(client, "v-b")  # the swap: v-a sleeps, its process stays
    assert a.state is RuntimeState.SLEEPING and a.process.pid == pid
    assert h.runtimes.status_of("v-a") == "sleeping"
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as backend:
        assert (await backend.get("/is_sleeping")).json() == {"is_sleeping": True}
        refused = await backend.post(CHAT, json=chat("v-a", max_tokens=1))
        assert refused.status_code == 503  # what vLLM answers while asleep
        assert refused.json()["error"]["type"] == "ModelSleepingError"
    assert h.runtimes.spawn_count == spawned + 1  # v-b only
    metrics = (await client.get("/metrics")).text
    assert 'tensor_router_runtime_state{runtime="v-a@text",state="sleeping"} 1.0' in metrics

    await _ok(client, "v-a")  # v-b stops (no router_sleep); v-a is woken, not loaded
    assert _runtime(h, "v-a") is a and a.state is RuntimeState.READY and a.process.pid == pid
    assert h.runtimes.status_of("v-b") == "unloaded"
    assert h.runtimes.spawn_count == spawned + 1
    metrics = (await client.get("/metrics")).text
    assert 'tensor_router_loads_total{family="vllm",result="ok"} 2.0' in metrics  # a wake is none
    flow = [(e["event"], e.get("action"), e.get("result"), e.get("woken")) for e in events]
    assert flow == [
        ("loading", None, None, None),
        ("ready", None, None, None),
        ("sleeping", None, None, None),
        ("vllm_sleep", "sleep", "ok", None),
        ("loading", None, None, True),
        ("vllm_sleep", "wake", "ok", None),
        ("ready", None, None, True),
    ], events


async def test_unload_stops_a_sleeper(harness: RouterHarness) -> None:
    h = harness
    _setup(h)
    client = await h.start(h.settings(stop_grace=2))
    await _ok(client, "v-a")
    await _ok(client, "v-b")
    a = _runtime(h, "v-a")
    assert a.state is RuntimeState.SLEEPING
    r = await client.post("/router/v1/unload", json={"target": "all"})
    assert r.status_code == 200, r.text
    assert a.state is RuntimeState.STOPPED and not h.runtimes.runtimes()
    assert a.process.returncode is not None


async def test_a_failed_wake_falls_back_to_a_fresh_load(harness: RouterHarness) -> None:
    h = harness
    _setup(h)
    h.faults_for_model["v-a"] = "--wake-fails"
    client = await h.start(h.settings(stop_grace=2))
    events = _watch(h)
    await _ok(client, "v-a")
    await _ok(client, "v-b")
    first = _runtime(h, "v-a")
    assert first.state is RuntimeState.SLEEPING
    await _ok(client, "v-a")  # no error reaches the client
    second = _runtime(h, "v-a")
    assert second is not first and second.state is RuntimeState.READY
    assert first.process.returncode is not None  # the sleeper that would not wake is gone
    wake = [e for e in events if e["event"] == "vllm_sleep" and e["action"] == "wake"]
    assert [e["result"] for e in wake] == ["failed"], events
    assert any(e["event"] == "failed" and e.get("during") == "wake" for e in events), events


async def test_without_router_sleep_a_swap_stops_vllm(harness: RouterHarness) -> None:
    h = harness
    h.model("v-a", "vllm", model_param="v-a.safetensors")
    h.model("v-b", "vllm", model_param="v-b.safetensors")
    client = await h.start(h.settings(stop_grace=2))
    await _ok(client, "v-a")
    a = _runtime(h, "v-a")
    assert "--enable-sleep-mode" not in a.argv
    await _ok(client, "v-b")
    assert a.state is RuntimeState.STOPPED and h.runtimes.status_of("v-a") == "unloaded"
