"""Lending links between real routers on loopback (docs/lending.md): the site routes, and a
backlog on a slow owner lent to an idle fast helper on another node.

The master owns `slow` (a fake backend at 20 tokens/s, one generation at a time); the slave
has `fast` (200 tokens/s, one at a time) and models that cannot be linked for a stated reason.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.support.cluster import AUTH
from tests.support.harness import RouterHarness, chat, free_port, until
from tests.support.lending import (
    LINK,
    QUICK,
    SUMMARY,
    TEXT_LINKS,
    TOKENS,
    N,
    burst,
    candidates,
    leases_during,
    master_node,
    rows,
    samples,
    slave_known,
    slave_node,
    speeds,
    summary_leases,
    two_nodes,
)


async def test_site_routes_list_replace_delete_and_persist(tmp_harness: RouterHarness) -> None:
    master, slave = two_nodes(tmp_harness)
    await master.start()
    await slave.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=30) as client:
        assert await until(lambda: slave_known(client), True)
        found = await candidates(client, "slow")
        assert found["anchor"] == {"node_id": "m", "model_id": "slow"} and found["links"] == []
        by_id = {(c["node_id"], c["model_id"]): c for c in found["candidates"]}
        reasons = {key: c["ineligible_reason"] for key, c in by_id.items()}
        assert reasons == {
            ("m", "other"): "same_node",
            ("s1", "fast"): None,
            ("s1", "tiny"): "context_too_small",
            ("s1", "wide"): "parallel_slots",
            ("s1", "nocx"): "context_unknown",
        }
        fast = by_id[("s1", "fast")]
        assert fast["eligible"] and fast["context_size"] == 8192 and not fast["weights_match"]
        assert fast["multimodal"] is False and fast["filename"] == "fast.kcpps"
        # Refused, and nothing changes: a same-node link, an ineligible one in a good batch.
        same = {**LINK, "lends_to": [{"node_id": "m", "model_id": "other"}]}
        r = await client.post(TEXT_LINKS, json=same)
        assert r.status_code == 400 and "same_node" in r.text
        mixed = {**LINK, "lends_to": [*LINK["lends_to"], {"node_id": "s1", "model_id": "tiny"}]}
        r = await client.post(TEXT_LINKS, json=mixed)
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_too_small"
        r = await client.post(TEXT_LINKS, json={**LINK, "node_url": "http://127.0.0.1:1"})
        assert r.status_code == 400
        assert (await candidates(client, "slow"))["links"] == []
        # Set, seen from both ends.
        r = await client.post(TEXT_LINKS, json=LINK)
        assert r.status_code == 200, r.text
        found = await candidates(client, "slow")
        assert [(x["helper"]["model_id"], x["load_if_unloaded"]) for x in found["links"]] == [
            ("fast", True)
        ]
        lends = {c["model_id"]: c["lends_to"] for c in found["candidates"]}
        assert lends["fast"] is True and lends["tiny"] is False
        seen = await candidates(client, "fast", node="s1")
        assert {c["model_id"]: c["borrows_from"] for c in seen["candidates"]}["slow"] is True
        # The image lane keeps its own links: slow is no image model; pic is.
        r = await client.get("/router/v1/site/routing-groups", params={"model_id": "slow"})
        assert r.status_code == 404
        r = await client.get("/router/v1/site/routing-groups", params={"model_id": "pic"})
        assert r.status_code == 200, r.text
        image = [(c["node_id"], c["model_id"], c["eligible"]) for c in r.json()["candidates"]]
        assert image == [("s1", "pic2", True)]  # no context rule on the image lane
        pic = {"anchor": {"model_id": "pic"}, "lends_to": [{"node_id": "s1", "model_id": "pic2"}]}
        assert (await client.post("/router/v1/site/routing-groups", json=pic)).status_code == 200
        text_links = (await candidates(client, "slow"))["links"]
        assert [x["helper"]["model_id"] for x in text_links] == ["fast"]
        # Delete, then again (nothing left).
        r = await client.delete(TEXT_LINKS, params={"node_id": "m", "model_id": "slow"})
        assert r.status_code == 200 and r.json()["removed"] == 1
        r = await client.delete(TEXT_LINKS, params={"node_id": "m", "model_id": "slow"})
        assert r.status_code == 404
        assert (await client.post(TEXT_LINKS, json=LINK)).status_code == 200
    # Links survive a restart of the master.
    master.kill()
    await master.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=30) as client:
        found = await candidates(client, "slow")
        assert [x["helper"] for x in found["links"]] == [{"node_id": "s1", "model_id": "fast"}]


async def test_a_backlog_is_lent_to_an_idle_fast_helper(tmp_harness: RouterHarness) -> None:
    master, slave = two_nodes(tmp_harness)
    await master.start()
    await slave.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(lambda: slave_known(client), True)
        for model in ("slow", "fast"):  # both loaded, so neither run pays a load
            assert (
                await client.post("/v1/chat/completions", json=chat(model, max_tokens=TOKENS))
            ).status_code == 200
        without, statuses = await burst(client)
        assert statuses == [200] * N
        local0, lent0 = await rows(client, master, "slow"), await rows(client, slave, "fast")

        assert (await client.post(TEXT_LINKS, json=LINK)).status_code == 200
        running = asyncio.create_task(burst(client))
        leases = await leases_during(client, running)
        with_link, statuses = await running
        assert statuses == [200] * N  # no client ever sees the helper's 409
        # Lent only over a lease: the summary showed it while the backlog lasted (an empty
        # store prices nothing, so one slot at a time), and it runs out once nothing is held.
        assert [(x["helper_node_id"], x["helper_model_id"], x["helper_slots"]) for x in leases] == [
            ("s1", "fast", 1)
        ], leases
        assert leases[0]["owner_model_id"] == "slow" and leases[0]["load_helper_model"] is False
        assert await until(lambda: summary_leases(client), [], deadline=30)
        # Each node's own fits, refit on its timer from its own store, reach the summary.
        assert await until(lambda: samples(client, "m", "slow"), True, deadline=30)
        assert await until(lambda: samples(client, "s1", "fast"), True, deadline=30)
        local1, lent1 = await rows(client, master, "slow"), await rows(client, slave, "fast")
        assert lent1 - lent0 >= 1, "the helper served none of the backlog"
        assert (local1 - local0) + (lent1 - lent0) == N  # each request recorded once
        # Alone, the owner needs N x 0.4 s; the helper takes most of the backlog.
        assert with_link < 0.75 * without, (with_link, without)

        # Streams are never lent, however long the owner's backlog.
        _, statuses = await burst(client, stream=True)
        assert statuses == [200] * N
        assert await rows(client, slave, "fast") == lent1
        assert await rows(client, master, "slow") == local1 + N

        # A client cannot claim to be lent work: the mark counts on node routes only.
        marked = {"X-Tensors-Offload": "1", "X-Tensors-Offload-Load": "0"}
        r = await client.post(
            "/v1/chat/completions", json=chat("slow", max_tokens=TOKENS), headers=marked
        )
        assert r.status_code == 200
        local2 = await rows(client, master, "slow")

        # The helper refuses borrowed work that would need a load its link forbids.
        async with httpx.AsyncClient(base_url=slave.base, timeout=30) as node:
            r = await node.post(
                "/router/v1/node/inference/v1/chat/completions",
                json=chat("tiny", max_tokens=TOKENS),
                headers={**AUTH, **marked},
            )
            assert r.status_code == 409 and r.json()["error"]["code"] == "offload_returned"
            # ... and any borrowed work while a request of its own is on the lane.
            long = chat("fast", max_tokens=200)  # 1 s at 200 tokens/s
            own = asyncio.create_task(node.post("/v1/chat/completions", json=long))

            async def lent_status() -> int:
                r = await node.post(
                    "/router/v1/node/inference/v1/chat/completions",
                    json=chat("fast", max_tokens=TOKENS),
                    headers={**AUTH, "X-Tensors-Offload": "1"},
                )
                return r.status_code

            assert await until(lent_status, 409, deadline=5)
            assert (await own).status_code == 200
            assert await lent_status() == 200  # its own work done: borrowed work is served

        # A killed helper: every request falls back to the owner, none fails.
        slave.kill()
        _, statuses = await burst(client)
        assert statuses == [200] * N
        assert await rows(client, master, "slow") == local2 + N


async def test_a_slave_owned_link_is_held_on_the_master_and_lent_to_another_node(
    tmp_harness: RouterHarness,
) -> None:
    """The owner `slow` lives on s1, the helper `fast` on s2: the master holds the backlog
    it would relay to s1, judging s1 busy from its runtime status and what it relayed."""
    speeds(tmp_harness)
    mport, p1, p2 = free_port(), free_port(), free_port()
    urls = [f"http://127.0.0.1:{p}" for p in (p1, p2)]
    # Two samples fit a model here, so the second backlog is priced.
    tune = {**QUICK, "scheduling_min_samples": 2}
    master = master_node(tmp_harness, mport, urls, {"other": {"contextsize": 4096}}, tune)
    s1 = slave_node(tmp_harness, "s1", p1, mport, {"slow": {"contextsize": 4096}}, tune)
    s2 = slave_node(tmp_harness, "s2", p2, mport, {"fast": {"contextsize": 8192}}, tune)
    for node in (master, s1, s2):
        await node.start()
    link = {
        "anchor": {"node_id": "s1", "model_id": "slow"},
        "lends_to": [{"node_id": "s2", "model_id": "fast"}],
    }

    async def both_known() -> bool:
        reply = await client.get(TEXT_LINKS, params={"node_id": "s1", "model_id": "slow"})
        return reply.status_code == 200 and any(
            c["node_id"] == "s2" for c in reply.json()["candidates"]
        )

    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(both_known, True, deadline=30)
        for model in ("slow", "fast"):
            assert (
                await client.post("/v1/chat/completions", json=chat(model, max_tokens=TOKENS))
            ).status_code == 200
        assert (await client.post(TEXT_LINKS, json=link)).status_code == 200
        running = asyncio.create_task(burst(client))
        leases = await leases_during(client, running)
        _, statuses = await running
        assert statuses == [200] * N
        assert [(x["owner_node_id"], x["helper_node_id"]) for x in leases] == [("s1", "s2")]
        owned, lent = await rows(client, s1, "slow"), await rows(client, s2, "fast")
        assert lent - 1 >= 1, "the helper on s2 served none of s1's backlog"
        assert (owned - 1) + (lent - 1) == N  # each request recorded once, where it ran

        # Both nodes' own fits are in now (each refits on its timer): the next backlog is
        # priced, and the helper, faster per job than the owner, gets the faster slots.
        assert await until(lambda: fitted(client, {("s1", "slow"), ("s2", "fast")}), True)
        assert await until(lambda: summary_leases(client), [], deadline=30)  # the first ran out
        running = asyncio.create_task(burst(client))
        leases = await leases_during(client, running)
        _, statuses = await running
        assert statuses == [200] * N
        assert [(x["helper_node_id"], x["helper_slots"]) for x in leases] == [("s2", 2)], (
            leases,
            (await client.get(SUMMARY)).json(),
        )
        assert await rows(client, s2, "fast") > lent


async def fitted(client: httpx.AsyncClient, wanted: set[tuple[str, str]]) -> bool:
    reply = await client.get(SUMMARY)
    assert reply.status_code == 200, reply.text
    found = {(c["node_id"], c["model_id"]) for c in reply.json()["costs"] if c["fitted"]}
    return wanted <= found
