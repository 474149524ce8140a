"""The site inventory's `benchmark` (the newest run, as /router/v1/models has it) and the node's
`hardware` are filled, no longer null."""

from __future__ import annotations

import os

import pytest

from router.memory.devices import host_device
from tests.support.harness import RouterHarness

pytestmark = pytest.mark.timeout(90)
INVENTORY = "/router/v1/site/inventory"


async def test_inventory_carries_benchmark_and_hardware(harness: RouterHarness) -> None:
    harness.model("chat")
    harness.model("other")
    client = await harness.start()
    first = (await client.get(INVENTORY)).json()
    hardware = first["nodes"][0]["hardware"]
    assert hardware["cpu_count"] == (os.cpu_count() or 1)
    assert hardware["memory_bytes"] > 0 and isinstance(hardware["accelerators"], list)
    # The memory package's host device: the ledger's own figure (tests/memory/
    # test_memory_readers.py holds that no other module reads it).
    assert hardware["memory_bytes"] == host_device().total
    assert all(m["benchmark"] is None for m in first["models"])
    run = await client.post(
        "/router/v1/benchmarks/run", json={"model_id": "chat", "sections": ["llm"]}
    )
    assert run.status_code == 200, run.text
    models = {m["id"]: m for m in (await client.get(INVENTORY)).json()["models"]}
    assert models["chat"]["benchmark"]["run_id"] == run.json()["run_id"]
    assert models["chat"]["benchmark"]["status"] == "success"
    assert models["other"]["benchmark"] is None
