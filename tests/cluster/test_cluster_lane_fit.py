"""The node's verdict in the cluster under `runtime.residency: lane` (issue 25): memory would
fit on both slaves, but one slave's text lane holds another model, so a load there would swap
it; the master takes the node's verdict (`evicts` from its dry run) over its own arithmetic and
sends the requests to the other slave.

A master with no models and two slaves (real `tensor-router start` processes, fake backends)
whose models are real demo GGUFs, so the estimates are real; each slave has a 1 GiB host
budget, which holds several ~30 MiB chat models."""

from __future__ import annotations

from typing import Any

import httpx

from tests.cluster.test_cluster_memory import gguf, row
from tests.support.cluster import AUTH, cluster, served_models, start_all
from tests.support.harness import RouterHarness, until

LANE = {"residency": "lane", "stop_grace": 1, "load_timeout": 20}


async def test_a_lane_that_holds_another_model_sends_requests_to_the_other_slave(
    tmp_harness: RouterHarness,
) -> None:
    chat, filler = gguf(tmp_harness.tmp, 1), gguf(tmp_harness.tmp, 2)
    c = cluster(
        tmp_harness,
        {},
        {"chat": chat, "filler": filler},
        {"chat": chat},
        slave_sections={"runtime": LANE, "memory": {"host_budget": "1GiB"}},
    )
    await start_all(c)
    s1, s2 = c.slaves
    async with (
        httpx.AsyncClient(timeout=30) as http,
        httpx.AsyncClient(base_url=c.master.base, timeout=30) as client,
    ):
        # s1's text lane holds the filler: a chat load there would stop it (one per lane).
        r = await http.post(
            s1.base + "/router/v1/node/load", json={"model": "filler"}, headers=AUTH
        )
        assert r.status_code == 200, r.text

        async def verdicts() -> dict[str, Any]:
            found = await row(client, "chat")
            return {r["node_id"]: r["evicts"] for r in (found or {}).get("replicas", [])}

        assert await until(verdicts, {"s1": True, "s2": False})
        # Memory alone would fit on both: the master's arithmetic would not tell them apart.
        chat_row = await row(client, "chat")
        assert chat_row is not None
        nodes = (await client.get("/router/v1/site/inventory")).json()["nodes"]
        free = {
            n["node_id"]: d["free"]
            for n in nodes
            for d in n["devices"]
            if d["device"] == "host" and n["node_id"] in ("s1", "s2")
        }
        for replica in chat_row["replicas"]:
            assert 0 < replica["estimate"]["host"] <= free[replica["node_id"]]

        # Four requests: without the verdict they would alternate between s1 and s2, and s1
        # would swap the filler out for the chat model.
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
