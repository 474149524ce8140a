"""Memory across the cluster (issue 25): each node's snapshot carries its devices and each
runtime's memory; the master's GET /router/v1/models rows and the site inventory's node rows
show them; the replica choice prefers a node where the model fits without eviction.

The cluster of tests/support/cluster_memory.py (a master and two slaves, real demo GGUFs);
each slave has a 48 MiB host budget, which holds one ~30 MiB chat model."""

from __future__ import annotations

from tests.support.cluster_memory import assert_chat_goes_to_s2, filler_on_s1, row
from tests.support.harness import RouterHarness, until

MIB = 1 << 20


async def test_snapshots_carry_memory_and_placement_prefers_a_node_where_it_fits(
    tmp_harness: RouterHarness,
) -> None:
    # s1 holds the filler: the chat model no longer fits there without evicting it.
    async with filler_on_s1(tmp_harness, {"memory": {"host_budget": "48MiB"}}) as f:
        client = f.client

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

        # Without the memory preference the requests would alternate between s1 and s2.
        await assert_chat_goes_to_s2(f)

        async def chat_resident_on_s2() -> object:
            found = await row(client, "chat")
            replicas = (found or {}).get("replicas", [])
            return sorted(r["node_id"] for r in replicas if r["memory"])

        assert await until(chat_resident_on_s2, ["s2"])
