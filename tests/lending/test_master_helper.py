"""The master as a lending helper (docs/lending.md, "The master as a helper"), with real
routers on loopback: the slave's `slow` (20 tokens/s, one generation at a time) lends its
backlog, held on the master, to the master's own `fast` (200 tokens/s). The master sends each
lent request to its own node inference route, so it is served as borrowed work there.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.support.cluster import AUTH
from tests.support.harness import RouterHarness, chat, free_port, until
from tests.support.lending import (
    QUICK,
    TEXT_LINKS,
    TOKENS,
    N,
    burst,
    leases_during,
    master_node,
    rows,
    slave_node,
    speeds,
    summary_leases,
)

DECISIONS = "/router/v1/site/offload/decisions"

LINK = {
    "anchor": {"node_id": "s1", "model_id": "slow"},
    "lends_to": [{"node_id": "m", "model_id": "fast"}],
}


async def test_a_slave_backlog_is_lent_to_the_masters_own_model(tmp_harness: RouterHarness) -> None:
    speeds(tmp_harness)
    mport, sport = free_port(), free_port()
    master = master_node(
        tmp_harness, mport, [f"http://127.0.0.1:{sport}"], {"fast": {"contextsize": 8192}}
    )
    slave = slave_node(tmp_harness, "s1", sport, mport, {"slow": {"contextsize": 4096}})
    await master.start()
    await slave.start()

    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(lambda: registered(client), True, deadline=30)
        for model in ("slow", "fast"):  # both loaded, so neither run pays a load
            assert (
                await client.post("/v1/chat/completions", json=chat(model, max_tokens=TOKENS))
            ).status_code == 200
        without, statuses = await burst(client)
        assert statuses == [200] * N
        owned0, lent0 = await rows(client, slave, "slow"), await rows(client, master, "fast")
        assert owned0 - 1 == N and lent0 == 1  # without a link the slave served them all

        assert (await client.post(TEXT_LINKS, json=LINK)).status_code == 200
        running = asyncio.create_task(burst(client))
        leases = await leases_during(client, running)
        # The master's own request for the helper's lane during the backlog is served too.
        own = await client.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
        assert own.status_code == 200 and own.json()["model"] == "fast", own.text
        with_link, statuses = await running
        assert statuses == [200] * N  # no client sees a 409; `burst` checks the model name
        assert [
            (x["owner_node_id"], x["helper_node_id"], x["helper_model_id"]) for x in leases
        ] == [("s1", "m", "fast")], leases
        assert await until(lambda: summary_leases(client), [], deadline=30)
        owned1, lent1 = await rows(client, slave, "slow"), await rows(client, master, "fast")
        lent = lent1 - lent0 - 1  # less the master's own request
        assert lent >= 1, "the master's own model served none of the backlog"
        assert (owned1 - owned0) + lent == N  # each request recorded once, where it ran
        # Alone, the owner needs N x 0.4 s; the master's fast model takes much of it.
        assert with_link < 0.75 * without, (with_link, without)


async def held_borrowed(node: httpx.AsyncClient) -> int:
    reply = await node.get("/router/v1/node/runtime-status", headers=AUTH)
    assert reply.status_code == 200, reply.text
    count: int = reply.json()["lanes"]["text"]["held_borrowed"]
    return count


async def test_the_masters_own_request_hands_back_borrowed_work(tmp_harness: RouterHarness) -> None:
    """Both models at 20 tokens/s, depth 1 and two slots a lease: one lent request generates
    on the master's `fast` while another waits in its gate; a request of the master's own for
    `fast` hands the waiting one back (its client still gets 200, from the slave), and the
    master's helper row names the owner the lent request carried."""
    speeds(tmp_harness)
    tmp_harness.faults_for_model["fast"] = f"--token-rate 20 --tokens {TOKENS} --parallel 1"
    tune = {**QUICK, "scheduling_backend_depth": 1, "offload_slower_helper_slots": 2}
    mport, sport = free_port(), free_port()
    master = master_node(
        tmp_harness, mport, [f"http://127.0.0.1:{sport}"], {"fast": {"contextsize": 8192}}, tune
    )
    slave = slave_node(tmp_harness, "s1", sport, mport, {"slow": {"contextsize": 4096}}, tune)
    await master.start()
    await slave.start()
    n = 20
    async with (
        httpx.AsyncClient(base_url=master.base, timeout=120) as client,
        httpx.AsyncClient(base_url=master.base, timeout=120) as node,
    ):
        assert await until(lambda: registered(client), True, deadline=30)
        for model in ("slow", "fast"):
            assert (
                await client.post("/v1/chat/completions", json=chat(model, max_tokens=TOKENS))
            ).status_code == 200
        owned0, lent0 = await rows(client, slave, "slow"), await rows(client, master, "fast")
        assert (await client.post(TEXT_LINKS, json=LINK)).status_code == 200

        async def one() -> int:
            r = await client.post("/v1/chat/completions", json=chat("slow", max_tokens=TOKENS))
            assert r.status_code != 200 or r.json()["model"] == "slow", r.text
            return r.status_code

        running = asyncio.gather(*(one() for _ in range(n)))
        assert await until(lambda: held_borrowed(node), 1, deadline=30), "nothing waited"
        own = await client.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
        assert own.status_code == 200, own.text
        assert await running == [200] * n  # the returned one ran on its owner
        reply = await client.get(DECISIONS, params={"kind": "helper"})
        assert reply.status_code == 200, reply.text
        back = [d for d in reply.json()["decisions"] if d["outcome"] == "borrowed_returned"]
        assert back, reply.json()
        for row in back:
            assert (row["owner_node_id"], row["owner_model_id"]) == ("s1", "slow"), row
            assert (row["helper_node_id"], row["helper_model_id"]) == ("m", "fast"), row
            assert row["detail"]["returned"] >= 1, row
        owned1, lent1 = await rows(client, slave, "slow"), await rows(client, master, "fast")
        assert lent1 - lent0 - 1 >= 1  # the master's own model served some of the backlog
        assert (owned1 - owned0) + (lent1 - lent0 - 1) == n  # each request recorded once


async def registered(client: httpx.AsyncClient) -> bool:
    reply = await client.get(TEXT_LINKS, params={"node_id": "s1", "model_id": "slow"})
    return reply.status_code == 200 and any(
        (c["node_id"], c["model_id"], c["eligible"]) == ("m", "fast", True)
        for c in reply.json()["candidates"]
    )
