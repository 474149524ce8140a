"""Pooled memory under `runtime.residency: memory`, the default (docs/cluster.md, "Pooled
memory"): the master's admission and eviction count only the part of a spread model its host
keeps, so a model larger than the host budget that the lending node covers is admitted, the
dry run naming the node; the same file without `router_rpc_nodes` is still refused as too
large, and a spread model the nodes cannot cover is refused naming the shortfall. The master
runs the fake llama-server (it takes any flags) or the real one, the slave llama.cpp's real
RPC server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from router.demo_models import generate_text_models
from tests.real.router_fixtures import LLAMA_ARGS
from tests.support.harness import RouterHarness, until
from tests.support.pooled import (
    port_range,
    require_rpc_server,
    rpc_servers,
    s1_available,
    spread_pair,
)

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]
MEMORY = {"residency": "memory"}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def test_a_spread_model_larger_than_the_host_budget_is_admitted(
    tmp_harness: RouterHarness, tmp_path: Path
) -> None:
    require_rpc_server()
    model = generate_text_models(tmp_path / "models")["chat-a"]
    master, slave = spread_pair(tmp_harness, model, port_range(), master_runtime=MEMORY)
    await slave.start()
    await master.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=60) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        dry = await client.post("/router/v1/load", json={"model": "spread", "dry_run": True})
        assert dry.status_code == 200, dry.text
        plan = dry.json()
        assert plan["fits"] is True and plan["evict"] == []
        (host,) = plan["devices"]
        assert host["device"] == "host" and 0 < host["estimate"] <= host["budget"]
        assert [n["node_id"] for n in plan["pooled"]["nodes"]] == ["s1"]
        # A lease takes only the node's free room: it evicts nothing there, and says so.
        assert [n["evicts"] for n in plan["pooled"]["nodes"]] == [[]]

        # The same file on this box alone is larger than its budget: still refused.
        solo = await client.post("/router/v1/load", json={"model": "solo", "dry_run": True})
        assert solo.status_code == 400 and solo.json()["error"]["code"] == "model_too_large"

        reply = await client.post("/v1/chat/completions", json={**CHAT, "model": "spread"})
        assert reply.status_code == 200, reply.text
        assert len(rpc_servers(slave)) == 1


async def test_a_spread_model_the_nodes_cannot_cover_is_refused(
    tmp_harness: RouterHarness, tmp_path: Path
) -> None:
    require_rpc_server()
    model = generate_text_models(tmp_path / "models")["chat-a"]
    master, slave = spread_pair(
        tmp_harness,
        model,
        port_range(),
        master_runtime=MEMORY,
        slave_extra={"pooled": {"max_bytes": 1024}},  # less than one layer
    )
    await slave.start()
    await master.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=60) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        for path, body in (
            ("/router/v1/load", {"model": "spread", "dry_run": True}),
            ("/v1/chat/completions", {**CHAT, "model": "spread"}),
        ):
            reply = await client.post(path, json=body)
            assert reply.status_code == 503, reply.text
            error = reply.json()["error"]
            assert error["code"] == "no_pooled_room" and "bytes free" in error["message"]
    assert rpc_servers(slave) == []


async def test_the_real_engine_spread_under_memory_residency_answers_and_stays_in_budget(
    tmp_harness: RouterHarness, demo_text: dict[str, Path], llama_server_bin: Path
) -> None:
    require_rpc_server()
    llama = {"binary_path": str(llama_server_bin), "extra_args": LLAMA_ARGS}
    master, slave = spread_pair(
        tmp_harness, demo_text["chat-a"], port_range(), llama=llama, master_runtime=MEMORY
    )
    await slave.start()
    await master.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        reply = await client.post("/v1/chat/completions", json={**CHAT, "model": "spread"})
        assert reply.status_code == 200, reply.text
        status = (await client.get("/router/v1/status")).json()
        (runtime,) = status["runtimes"]
        assert runtime["state"] == "ready" and runtime["memory"]["device"] == "host"
        assert [d["node_id"] for d in status["remote_devices"]] == ["s1"]
