"""Pooled memory's second load (issue 34, docs/cluster.md "Second loads, measurement"): the
master's load capture records the bytes each load sent to the lending node, and a second
load of the same model, its tensors in the node's RPC tensor cache, sends under 10 % of the
first's. The model has 2048-wide F32 matrices (16 MiB each), above llama.cpp's 10 MiB cache
threshold; the demo models' tensors are all below it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from router.cluster.pooled.ports import open_ports
from router.demo_models import write_llama_gguf
from tests.real.router_fixtures import LLAMA_ARGS
from tests.support.harness import RouterHarness, until
from tests.support.pooled import port_range, rpc_servers, s1_available, spread_pair

pytestmark = [pytest.mark.real, pytest.mark.timeout(420)]
BIG = {"n_layer": 2, "n_embd": 2048, "n_head": 16, "n_ff": 2048}
ASK = {"model": "spread", "prompt": "Hello", "max_tokens": 2, "temperature": 0}


async def _load_and_unload(client: httpx.AsyncClient, slave: Any, ports: tuple[int, int]) -> None:
    reply = await client.post("/v1/completions", json=ASK)
    assert reply.status_code == 200, reply.text
    assert len(rpc_servers(slave)) == 1
    unloaded = await client.post("/router/v1/unload", json={"target": "all"})
    assert unloaded.status_code == 200, unloaded.text

    async def none_left() -> bool:
        return rpc_servers(slave) == [] and open_ports(*ports) == []

    assert await until(none_left, True, deadline=30)


async def _captured(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    reply = await client.get("/router/v1/site/load-captures", params={"node": "m"})
    assert reply.status_code == 200, reply.text
    rows = [c for c in reply.json()["captures"] if c["model"] == "spread" and c["status"] == "ok"]
    return sorted(rows, key=lambda c: float(c["started_at"]))


async def test_the_load_capture_reports_the_bytes_sent_and_a_second_load_sends_little(
    tmp_harness: RouterHarness, llama_server_bin: Path
) -> None:
    h, ports = tmp_harness, port_range()
    model = write_llama_gguf(h.tmp / "big.gguf", seed=7, name="pooled-cache", **BIG)
    analytics = {
        "database_path": str(h.tmp / "data-master" / "router.sqlite"),
        "load_capture_enabled": True,
    }
    llama = {"binary_path": str(llama_server_bin), "extra_args": LLAMA_ARGS}
    master, slave = spread_pair(h, model, ports, llama=llama, master_extra={"analytics": analytics})
    await slave.start()
    await master.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=180) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        await _load_and_unload(client, slave, ports)
        await _load_and_unload(client, slave, ports)
        captured = await _captured(client)
    # On a busy machine a lease renewal can miss (lease_ttl 6 s) and the master reloads the
    # model in between: such a reload is a cached load too, so the first and last are compared.
    assert len(captured) >= 2, captured
    first, second = captured[0]["pooled"], captured[-1]["pooled"]
    assert [n["node_id"] for n in first["nodes"]] == ["s1"], first
    (lent,) = first["nodes"]
    assert lent["endpoint"].startswith("127.0.0.1:") and lent["bytes_sent"] == first["bytes_sent"]
    # The node holds at least one of the three layers: most of a layer's 112 MiB went over.
    assert first["bytes_sent"] > 64 * 1024 * 1024, first
    assert 0 < second["bytes_sent"] < first["bytes_sent"] / 10, (first, second)
