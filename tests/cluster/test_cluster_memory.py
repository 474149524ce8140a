"""Memory across the cluster (issue 25): each node's snapshot carries its devices and each
runtime's memory; the master's GET /router/v1/models rows and the site inventory's node rows
show them; the replica choice prefers a node where the model fits without eviction.

A master with no models and two slaves (real `tensor-router start` processes, fake backends)
whose models are real demo GGUFs, so the estimates are real; each slave has a 48 MiB host
budget, which holds one ~30 MiB chat model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from router.demo_models import write_llama_gguf
from tests.support.cluster import AUTH, cluster, served_models, start_all
from tests.support.harness import RouterHarness, until

MIB = 1 << 20


def gguf(tmp: Path, seed: int) -> bytes:
    path = tmp / f"demo-{seed}.gguf"
    write_llama_gguf(path, seed=seed, name=f"chat {seed}")
    return path.read_bytes()


async def row(client: httpx.AsyncClient, model_id: str) -> dict[str, Any] | None:
    data = (await client.get("/router/v1/models")).json()["data"]
    return next((m for m in data if m["id"] == model_id), None)


async def test_snapshots_carry_memory_and_placement_prefers_a_node_where_it_fits(
    tmp_harness: RouterHarness,
) -> None:
    chat, filler = gguf(tmp_harness.tmp, 1), gguf(tmp_harness.tmp, 2)
    c = cluster(
        tmp_harness,
        {},
        {"chat": chat, "filler": filler},
        {"chat": chat},
        slave_sections={"memory": {"host_budget": "48MiB"}},
    )
    await start_all(c)
    s1, s2 = c.slaves
    async with (
        httpx.AsyncClient(timeout=30) as http,
        httpx.AsyncClient(base_url=c.master.base, timeout=30) as client,
    ):
        # s1 holds the filler: the chat model no longer fits there without evicting it.
        r = await http.post(
            s1.base + "/router/v1/node/load", json={"model": "filler"}, headers=AUTH
        )
        assert r.status_code == 200, r.text

        async def filler_memory() -> object:
            found = await row(client, "filler")
            return found and found["memory"] and found["memory"]["source"]

        # Measured just after its load (docs/residency.md): read once the figure is in.
        assert await until(filler_memory, "measured")
        filler_row = await row(client, "filler")
        assert filler_row is not None and filler_row["node_id"] == "s1"
        held = filler_row["memory"]
        assert held["device"] == "host" and held["bytes"] > 0
        (replica,) = filler_row["replicas"]
        assert replica["memory"] == held and replica["estimate"]["host"] == held["bytes"]

        chat_row = await row(client, "chat")
        assert chat_row is not None and chat_row["memory"] is None
        assert sorted(r["node_id"] for r in chat_row["replicas"]) == ["s1", "s2"]
        estimates = {r["node_id"]: r["estimate"]["host"] for r in chat_row["replicas"]}
        assert estimates["s1"] == estimates["s2"] > 48 * MIB - held["bytes"]

        nodes = (await client.get("/router/v1/site/inventory")).json()["nodes"]
        devices = {n["node_id"]: n["devices"] for n in nodes}
        (s1_host,) = [d for d in devices["s1"] if d["device"] == "host"]
        assert s1_host["budget"] == 48 * MIB and s1_host["used"] == held["bytes"]
        assert s1_host["free"] == max(0, 48 * MIB - held["bytes"])
        assert [d["used"] for d in devices["s2"] if d["device"] == "host"] == [0]
        assert devices["m"] and all(d["used"] == 0 for d in devices["m"])

        # Four requests: without the memory preference they would alternate between s1 and
        # s2, and s1 would stop the filler to load the chat model.
        for _ in range(4):
            reply = await client.post(
                "/v1/chat/completions",
                json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert reply.status_code == 200, reply.text
        assert await until(lambda: served_models(s2), ["chat"])
        assert "chat" not in await served_models(s1)
        state = (await http.get(s1.base + "/router/v1/node/state", headers=AUTH)).json()
        assert [r["model"] for r in state["runtimes"]] == ["filler"]

        async def chat_resident_on_s2() -> object:
            found = await row(client, "chat")
            replicas = (found or {}).get("replicas", [])
            return sorted(r["node_id"] for r in replicas if r["memory"])

        assert await until(chat_resident_on_s2, ["s2"])
