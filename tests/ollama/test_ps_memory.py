"""`/api/ps` `size` and `size_vram` come from the manager's live memory ledger (issue 25), read
with the official `ollama` client: `size` is every byte the runtime holds, `size_vram` its GPU
part, so `ollama ps` shows the CPU/GPU split. The GPU case runs at the NVML seam: a fake
`pynvml` module (tests/memory/test_memory_devices.py) gives the router one GPU."""

from __future__ import annotations

import os

import pytest

from router.memory.devices import discover
from router.runtime import residency
from tests.memory.test_memory_devices import FakeNvml
from tests.support.harness import RouterHarness
from tests.support.ollama import client_for
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("no_measurement")

MIB, GIB = 1 << 20, 1 << 30


async def _status_memory(h: RouterHarness) -> dict[str, object]:
    assert h.client is not None
    (runtime,) = (await h.client.get("/router/v1/status")).json()["runtimes"]
    memory = runtime["memory"]
    assert isinstance(memory, dict)
    return memory


async def test_ps_sizes_on_the_host(harness: RouterHarness) -> None:
    harness.model("chat-a", gpulayers=0)
    os.truncate(harness.models_dir / "chat-a.gguf", 8 * MIB)
    await harness.start()
    client = client_for(harness)
    await client.generate(model="chat-a")  # load
    (loaded,) = (await client.ps()).models
    memory = await _status_memory(harness)
    assert memory["device"] == "host" and memory["source"] == "estimate"
    assert loaded.size == memory["bytes"] and loaded.size > 8 * MIB
    assert loaded.size_vram == 0


async def test_ps_sizes_with_a_gpu_at_the_nvml_seam(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeNvml([("RTX A", 8 * GIB, [])])
    monkeypatch.setattr(residency, "machine_devices", lambda: discover(lambda: fake))
    harness.model("chat-g", gpulayers=99)
    os.truncate(harness.models_dir / "chat-g.gguf", 8 * MIB)
    await harness.start()
    client = client_for(harness)
    await client.generate(model="chat-g")
    (loaded,) = (await client.ps()).models
    memory = await _status_memory(harness)
    book = harness.runtimes._book
    (view,) = harness.runtimes.views()
    need, _ = book.need(view_spec := harness.runtimes.runtimes()[0].spec)
    assert view_spec.key == view.key
    assert memory["device"] == "gpu0" and loaded.size == memory["bytes"] == need.total
    assert loaded.size_vram == need.devices["gpu0"] > 8 * MIB
    assert loaded.size - loaded.size_vram == need.devices["host"]  # the process overhead


async def test_gpu_budget_drives_an_eviction(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two GPU models on one fake GPU whose budget holds one of them: the dry run and the load
    of the second stop the first (it is in another lane, so only memory can make it go)."""
    fake = FakeNvml([("RTX A", 8 * GIB, [])])
    monkeypatch.setattr(residency, "machine_devices", lambda: discover(lambda: fake))
    harness.model("chat-g", gpulayers=99)
    harness.model("emb-g", embeddingsgpu=True, embeddingsmodel="emb-g.gguf")
    for name in ("chat-g.gguf", "emb-g.gguf"):
        os.truncate(harness.models_dir / name, 64 * MIB)
    base = harness.settings(residency="memory")
    memory = base.memory.model_copy(update={"gpu_budget": 100 * MIB})  # one 64 MiB model + margin
    client = await harness.start(base.model_copy(update={"memory": memory}))
    assert (await client.post("/router/v1/load", json={"model": "chat-g"})).status_code == 200
    dry = (await client.post("/router/v1/load", json={"model": "emb-g", "dry_run": True})).json()
    assert dry["fits"] is True and [v["model"] for v in dry["evict"]] == ["chat-g"]
    (gpu,) = [d for d in dry["devices"] if d["device"] == "gpu0"]
    assert gpu["budget"] == 100 * MIB and gpu["used"] > 64 * MIB
    assert (await client.post("/router/v1/load", json={"model": "emb-g"})).status_code == 200
    assert {v.config.id for v in harness.runtimes.views()} == {"emb-g"}
