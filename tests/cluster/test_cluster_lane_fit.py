"""The node's verdict in the cluster under `runtime.residency: lane` (issue 25): memory would
fit on both slaves, but one slave's text lane holds another model, so a load there would swap
it; the master takes the node's verdict (`evicts` from its dry run) over its own arithmetic and
sends the requests to the other slave.

The cluster of tests/support/cluster_memory.py (a master and two slaves, real demo GGUFs);
each slave has a 1 GiB host budget, which holds several ~30 MiB chat models."""

from __future__ import annotations

from typing import Any

from tests.support.cluster_memory import assert_chat_goes_to_s2, filler_on_s1, row
from tests.support.harness import RouterHarness, until

LANE = {"residency": "lane", "stop_grace": 1, "load_timeout": 20}


async def test_a_lane_that_holds_another_model_sends_requests_to_the_other_slave(
    tmp_harness: RouterHarness,
) -> None:
    # s1's text lane holds the filler: a chat load there would stop it (one per lane).
    sections = {"runtime": LANE, "memory": {"host_budget": "1GiB"}}
    async with filler_on_s1(tmp_harness, sections) as f:
        client = f.client

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

        # Without the verdict the requests would alternate between s1 and s2.
        await assert_chat_goes_to_s2(f)
