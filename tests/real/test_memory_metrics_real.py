"""/metrics' memory series against real llama-server processes (issue 25): with two demo chat
models resident at once under `runtime.residency: memory`, every `tensor_router_memory_*`
and `tensor_router_runtime_memory_bytes` sample equals GET /router/v1/status's figures, and
once each process is measured (llama-server's own report, `-lv 4`) the series' `source`
label is `measured`. tests/memory/test_memory_metrics.py checks the same over the fake
backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness, until

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]

Labels = tuple[tuple[str, str], ...]


def _samples(text: str, name: str) -> dict[Labels, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _expected_runtimes(status: dict[str, Any]) -> dict[Labels, float]:
    out = {}
    for rt in status["runtimes"]:
        mem = rt["memory"]
        labels = {"model": rt["model"], "lane": rt["lanes"][0], "device": mem["device"]}
        out[tuple(sorted({**labels, "source": mem["source"]}.items()))] = float(mem["bytes"])
    return out


async def test_metrics_equal_the_status_with_two_real_models_resident(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    write_demo_text_kcpps(real_harness, demo_text)
    client = await real_harness.start(real_harness.settings(residency="memory"))
    for model in ("chat-a", "chat-b"):
        r = await client.post("/router/v1/load", json={"model": model})
        assert r.status_code == 200, r.text

    async def sources() -> dict[str, str]:
        runtimes = (await client.get("/router/v1/status")).json()["runtimes"]
        return {rt["model"]: rt["memory"]["source"] for rt in runtimes}

    # Each process is measured just after its load: compare once both figures are in.
    assert await until(sources, {"chat-a": "measured", "chat-b": "measured"}, 60)
    status = (await client.get("/router/v1/status")).json()
    text = (await client.get("/metrics")).text

    held = _samples(text, "tensor_router_runtime_memory_bytes")
    assert held == _expected_runtimes(status)
    assert {dict(k)["model"] for k in held} == {"chat-a", "chat-b"}
    assert {dict(k)["source"] for k in held} == {"measured"}
    assert all(v > 0 for v in held.values())
    for row in status["devices"]:
        key = (("device", row["device"]), ("kind", row["kind"]))
        assert _samples(text, "tensor_router_memory_used_bytes")[key] == float(row["used"])
        assert _samples(text, "tensor_router_memory_budget_bytes")[key] == float(row["budget"])
    (host,) = [d for d in status["devices"] if d["device"] == "host"]
    assert host["used"] == sum(held.values())  # both real processes, on the host (no GPU)
