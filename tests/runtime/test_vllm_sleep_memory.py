"""Issue 25: an asleep vLLM's host memory in the ledger (docs/residency.md, "In the runtime
manager"). A level-1 sleep moves the weights to host RAM; the ledger counts them there, and a
load that needs that host memory stops the sleeper. Fake vLLM backends through the real
supervisor (as in test_vllm_sleep.py), one GPU at the NVML seam (a fake `pynvml`), and
`runtime.residency: memory` with budgets computed from the estimates."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from router.memory.devices import discover
from router.runtime import RuntimeState, residency
from tests.memory.test_memory_devices import FakeNvml
from tests.support.harness import RouterHarness, chat
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("no_measurement")

MIB, GIB = 1 << 20, 1 << 30
CHAT = "/v1/chat/completions"


def _runtime(h: RouterHarness, model: str) -> Any:
    [rt] = [rt for rt in h.runtimes.runtimes() if rt.config.id == model]
    return rt


async def _memory(client: httpx.AsyncClient) -> dict[str, Any]:
    status = (await client.get("/router/v1/status")).json()
    return {r["model"]: r["memory"] for r in status["runtimes"]}


async def test_a_sleepers_weights_count_on_the_host_and_a_load_stops_it(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    fake = FakeNvml([("RTX A", 8 * GIB, [])])
    monkeypatch.setattr(residency, "machine_devices", lambda: discover(lambda: fake))
    h.model("v-a", "vllm", model_param="v-a.safetensors", router_sleep=1)
    h.model("v-b", "vllm", model_param="v-b.safetensors")
    h.model("chat-c", gpulayers=0)
    os.truncate(h.models_dir / "v-a.safetensors", 1 * GIB)  # sparse: the weights' size
    os.truncate(h.models_dir / "chat-c.gguf", 640 * MIB)
    base = h.settings(residency="memory", stop_grace=2)
    # Each vLLM claims 0.9 of the 8 GiB GPU (one at a time) and 2 GiB of host; the host holds
    # v-b and the sleeper's 1 GiB, but not chat-c (~0.8 GiB) too.
    budgets = {"gpu_budget": 8 * GIB, "host_budget": 3 * GIB + 512 * MIB}
    client = await h.start(
        base.model_copy(update={"memory": base.memory.model_copy(update=budgets)})
    )

    assert (await client.post(CHAT, json=chat("v-a", max_tokens=2))).status_code == 200
    a = _runtime(h, "v-a")
    assert (await client.post(CHAT, json=chat("v-b", max_tokens=2))).status_code == 200
    assert a.state is RuntimeState.SLEEPING and a.asleep  # the GPU's memory made it go
    memory = await _memory(client)
    assert memory["v-a"] == {"device": "host", "bytes": 1 * GIB, "source": "estimate"}
    devices = (await client.get("/router/v1/status")).json()["devices"]
    host = next(d for d in devices if d["device"] == "host")
    assert host["used"] == _need(h, "v-b")["host"] + 1 * GIB  # v-b's process and the sleeper

    dry = (await client.post("/router/v1/load", json={"model": "chat-c", "dry_run": True})).json()
    assert dry["fits"] is True and [v["model"] for v in dry["evict"]] == ["v-a"], dry
    assert (await client.post("/router/v1/load", json={"model": "chat-c"})).status_code == 200
    assert a.state is RuntimeState.STOPPED and a.process.returncode is not None
    assert {v.config.id for v in h.runtimes.views()} == {"v-b", "chat-c"}


def _need(h: RouterHarness, model: str) -> dict[str, int]:
    need, _ = h.runtimes._book.need(_runtime(h, model).spec)
    return dict(need.devices)


WEIGHTS = 64 * MIB


@pytest.mark.parametrize(
    ("memory", "sleeps"),
    [
        ({"host_budget": WEIGHTS, "reserve": 0}, True),  # exactly room for the weights
        ({"host_budget": WEIGHTS - 1, "reserve": 0}, False),
        # The whole of RAM as the budget, all of it reserved: nothing is available.
        ({"host_budget": 1 << 50, "reserve": 1 << 50}, False),
    ],
    ids=["room-for-the-weights", "no-room-in-the-host-budget", "no-room-beyond-the-reserve"],
)
async def test_the_sleep_asks_the_ledger_for_host_room(
    harness: RouterHarness, memory: dict[str, int], sleeps: bool
) -> None:
    """One runtime per lane: the swap to v-b evicts v-a, which sleeps only when its weights
    fit the host room the memory package grants (router/memory/host.py): the host budget less
    what other runtimes hold (v-a's own figure is replaced by its weights), and no more than
    what is available less `memory.reserve`. Otherwise it stops, as a swap would."""
    h = harness
    h.model("v-a", "vllm", model_param="v-a.safetensors", router_sleep=1)
    h.model("v-b", "vllm", model_param="v-b.safetensors")
    os.truncate(h.models_dir / "v-a.safetensors", WEIGHTS)  # sparse: the weights' size
    base = h.settings(stop_grace=2)
    client = await h.start(
        base.model_copy(update={"memory": base.memory.model_copy(update=memory)})
    )

    assert (await client.post(CHAT, json=chat("v-a", max_tokens=2))).status_code == 200
    a = _runtime(h, "v-a")
    assert (await client.post(CHAT, json=chat("v-b", max_tokens=2))).status_code == 200
    if sleeps:
        assert a.state is RuntimeState.SLEEPING and a.process.returncode is None
    else:
        assert a.state is RuntimeState.STOPPED and a.process.returncode is not None
        assert h.runtimes.status_of("v-a") == "unloaded"
