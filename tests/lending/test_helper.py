"""The helper's side of lending between real routers on loopback (docs/lending.md): the gate
of an enrolled model, an own request served before borrowed work that waits, unstarted
borrowed work handed back (and run by its owner), and restore after borrow.

Fake backends generate one request at a time (`--parallel 1`) at a stated token rate. The
helper's `cluster.scheduling_backend_depth` is 1, so a second borrowed request waits in its
gate; where the master must lend two requests at once to the helper, its depth is 2 (the
owner on this branch lends up to its depth to one helper).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from router.appkeys import LENDING
from tests.support.cluster import AUTH, TOKEN, served_rows
from tests.support.harness import RouterHarness, chat, free_port, until
from tests.support.lending import TEXT_LINKS, folder
from tests.support.router_process import RouterProcess, new_router

TOKENS = 8
NODE_CHAT = "/router/v1/node/inference/v1/chat/completions"
MARK = {**AUTH, "X-Tensors-Offload": "1"}
OWNER = "X-Tensors-Offload-Owner"
RESTORE_DELAY = 4.0  # s of quiet before the helper goes back to its model


def nodes(
    h: RouterHarness, master_rate: int, fast_rate: int, lent_at_once: int = 1
) -> tuple[RouterProcess, RouterProcess]:
    """The master pushes its lending values to the slave, so the helper's depth (1) and
    restore delay are set on the master; `lent_at_once` is the slots of the master's lease."""
    h.faults_for_model.update(
        {
            "slow": f"--token-rate {master_rate} --tokens {TOKENS} --parallel 1",
            "fast": f"--token-rate {fast_rate} --tokens {TOKENS} --parallel 1",
            "native": f"--token-rate 400 --tokens {TOKENS} --parallel 1",
        }
    )
    mport, sport = free_port(), free_port()
    surl = f"http://127.0.0.1:{sport}"
    master = new_router(
        h,
        name="master",
        port=mport,
        kcpps_dir=folder(h, "master", {"slow": {"contextsize": 4096}}),
        extra={
            "cluster": {
                "role": "master",
                "node_id": "m",
                "token": TOKEN,
                "slave_urls": [surl],
                "public_url": f"http://127.0.0.1:{mport}",
                "health_interval": 0.3,
                "scheduling_backend_depth": 1,
                "offload_restore_delay": f"{RESTORE_DELAY:g}s",
                "offload_slower_helper_slots": lent_at_once,
                "offload_faster_helper_slots": lent_at_once,
            },
            "analytics": {
                "database_path": str(h.tmp / "data-master" / "router.sqlite"),
                "flush_interval": 0.2,
            },
        },
    )
    slave = new_router(
        h,
        name="s1",
        port=sport,
        kcpps_dir=folder(h, "s1", {"fast": {"contextsize": 8192}, "native": {"contextsize": 8192}}),
        extra={
            "cluster": {
                "role": "slave",
                "node_id": "s1",
                "token": TOKEN,
                "public_url": surl,
                "master_url": f"http://127.0.0.1:{mport}",
                "sync_interval": 0.5,
                "scheduling_backend_depth": 1,
                "offload_restore_delay": f"{RESTORE_DELAY:g}s",
            },
            "analytics": {
                "database_path": str(h.tmp / "data-s1" / "router.sqlite"),
                "flush_interval": 0.2,
            },
        },
    )
    return master, slave


async def lane(node: httpx.AsyncClient) -> dict[str, Any]:
    r = await node.get("/router/v1/node/runtime-status", headers=AUTH)
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return {**doc["lanes"]["text"], "loaded": doc["loaded_models"]}


def field(node: httpx.AsyncClient, name: str) -> Callable[[], Awaitable[object]]:
    async def read() -> object:
        return (await lane(node))[name]

    return read


async def count(node: RouterProcess, model: str) -> int:
    return (await served_rows(node)).count(model)


async def settled(node: RouterProcess, model: str, want: int) -> bool:
    """The store holds `want` rows for `model` (the recorder flushes every 0.2 s)."""
    return await until(lambda: count(node, model), want, deadline=30)


async def linked(client: httpx.AsyncClient, restore: bool) -> None:
    async def known() -> bool:
        r = await client.get(TEXT_LINKS, params={"node_id": "m", "model_id": "slow"})
        return any(c["model_id"] == "fast" for c in r.json()["candidates"])

    assert await until(known, True, deadline=30)
    body = {
        "anchor": {"node_id": "m", "model_id": "slow"},
        "lends_to": [{"node_id": "s1", "model_id": "fast", "restore_after_borrow": restore}],
    }
    r = await client.post(TEXT_LINKS, json=body)
    assert r.status_code == 200, r.text


async def test_own_request_first_and_waiting_borrowed_work_goes_back(
    tmp_harness: RouterHarness,
) -> None:
    master, slave = nodes(tmp_harness, master_rate=20, fast_rate=20)  # 0.4 s a job on the helper
    await master.start()
    await slave.start()
    done: list[str] = []

    async with httpx.AsyncClient(base_url=slave.base, timeout=60) as node:

        async def send(name: str, borrowed: bool, tokens: int = TOKENS) -> int:
            path, headers = (NODE_CHAT, MARK) if borrowed else ("/v1/chat/completions", {})
            r = await node.post(path, json=chat("fast", max_tokens=tokens), headers=headers)
            assert r.status_code in (200, 409), r.text
            if r.status_code == 409:
                assert r.json()["error"]["code"] == "offload_returned"
            done.append(f"{name}:{r.status_code}")
            return r.status_code

        # The first borrowed request enrols `fast` here and loads it; the gate lets one in.
        assert await send("warm", borrowed=True) == 200
        # 5 s in the backend: the rest of the scene happens while it generates.
        first = asyncio.create_task(send("b1", borrowed=True, tokens=100))
        assert await until(field(node, "active"), 1, deadline=30)
        waiting = [asyncio.create_task(send(f"b{i}", borrowed=True)) for i in (2, 3)]
        assert await until(field(node, "held_borrowed"), 2, deadline=30)
        own = asyncio.create_task(send("own", borrowed=False))
        assert [await t for t in waiting] == [409, 409]  # handed back at once
        # While the own request waits or runs, new borrowed work is refused.
        assert await send("b4", borrowed=True) == 409
        assert await first == 200 and await own == 200
        # Completion order: the returns, then the borrowed job already in the backend, then
        # the own request (it waited behind that job only, not behind b2 and b3).
        assert done[0] == "warm:200"
        assert sorted(done[1:3]) == ["b2:409", "b3:409"]
        assert done.index("b1:200") < done.index("own:200")
        assert (await lane(node))["held_borrowed"] == 0
        # Borrowed work is taken again once the node's own work is done.
        assert await send("b5", borrowed=True) == 200
    # Recorded here: warm, b1, own, b5; the returned and refused ones are not.
    assert await settled(slave, "fast", 4)


async def test_a_waiting_client_that_goes_away_leaves_the_gate(tmp_harness: RouterHarness) -> None:
    master, slave = nodes(tmp_harness, master_rate=20, fast_rate=20)
    await master.start()
    await slave.start()
    async with httpx.AsyncClient(base_url=slave.base, timeout=60) as node:
        assert (
            await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=MARK)
        ).status_code == 200
        long = asyncio.create_task(
            node.post(NODE_CHAT, json=chat("fast", max_tokens=100), headers=MARK)
        )
        assert await until(field(node, "active"), 1, deadline=30)
        async with httpx.AsyncClient(base_url=slave.base, timeout=60) as other:
            gone = asyncio.create_task(
                other.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=MARK)
            )
            assert await until(field(node, "held_borrowed"), 1, deadline=30)
            gone.cancel()  # the client closes its connection while held in the gate
            with pytest.raises(asyncio.CancelledError):
                await gone
        assert await until(field(node, "held_borrowed"), 0, deadline=30)
        assert (await long).status_code == 200
        # Nothing leaked: the gate admits the next request at once, and it is served.
        assert (
            await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=MARK)
        ).status_code == 200
        assert (await lane(node))["active"] == 0


async def test_returned_work_completes_on_the_owner(tmp_harness: RouterHarness) -> None:
    # 1.6 s a job on the helper; the master's lease lends two at once to it.
    master, slave = nodes(tmp_harness, master_rate=20, fast_rate=5, lent_at_once=2)
    await master.start()
    await slave.start()
    n = 8
    async with (
        httpx.AsyncClient(base_url=master.base, timeout=120) as client,
        httpx.AsyncClient(base_url=slave.base, timeout=60) as node,
    ):
        assert (
            await client.post("/v1/chat/completions", json=chat("slow", max_tokens=TOKENS))
        ).status_code == 200
        assert (
            await node.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
        ).status_code == 200
        await linked(client, restore=False)
        burst = [
            asyncio.create_task(
                client.post("/v1/chat/completions", json=chat("slow", max_tokens=TOKENS))
            )
            for _ in range(n)
        ]
        # The master lends two at once; the helper admits one and holds the other.
        assert await until(field(node, "held_borrowed"), 1, deadline=30)
        own = await node.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
        assert own.status_code == 200
        replies = await asyncio.gather(*burst)
        assert [r.status_code for r in replies] == [200] * n  # the client never sees a 409
        assert all(r.json()["model"] == "slow" for r in replies)

    async def total() -> int:
        return await count(master, "slow") + await count(slave, "fast")

    # Every client request recorded once, on the owner or on the helper that kept it (plus
    # the two warm-ups and the helper's own request).
    assert await until(total, n + 3, deadline=30)
    assert await count(slave, "fast") - 2 >= 1, "the helper served none of the borrowed work"


async def test_restore_after_borrow_and_an_own_request_cancels_it(
    tmp_harness: RouterHarness,
) -> None:
    master, slave = nodes(tmp_harness, master_rate=20, fast_rate=200)
    await master.start()
    await slave.start()
    n = 8
    async with (
        httpx.AsyncClient(base_url=master.base, timeout=120) as client,
        httpx.AsyncClient(base_url=slave.base, timeout=60) as node,
    ):
        assert (
            await client.post("/v1/chat/completions", json=chat("slow", max_tokens=TOKENS))
        ).status_code == 200
        await linked(client, restore=True)

        # Through the master: borrowed work swaps the helper's lane from `native` to `fast`
        # (the helper served some of the backlog); after the quiet time, back to `native`.
        assert (
            await node.post("/v1/chat/completions", json=chat("native", max_tokens=TOKENS))
        ).status_code == 200
        assert (await lane(node))["loaded"] == ["native"]
        burst = [
            client.post("/v1/chat/completions", json=chat("slow", max_tokens=TOKENS))
            for _ in range(n)
        ]
        assert [r.status_code for r in await asyncio.gather(*burst)] == [200] * n

        async def served_some() -> bool:
            return await count(slave, "fast") > 0

        assert await until(served_some, True, deadline=30), "the helper served none"
        assert await until(field(node, "loaded"), ["native"], deadline=RESTORE_DELAY + 30)
        assert (await lane(node))["restore_model"] is None

        # Lent straight to the helper's node route, as the master relays it, with the flag:
        # the restore is pending for RESTORE_DELAY; an own request in that time cancels it.
        marked = {**MARK, "X-Tensors-Offload-Restore": "1"}
        assert (
            await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=marked)
        ).status_code == 200
        assert (await lane(node))["loaded"] == ["fast"]
        assert (await lane(node))["restore_model"] == "native"
        assert (
            await node.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
        ).status_code == 200
        assert (await lane(node))["restore_model"] is None
        await asyncio.sleep(RESTORE_DELAY + 1)  # past the time a restore would have fired
        assert (await lane(node))["loaded"] == ["fast"]
        # Without the flag, borrowed work leaves nothing to restore.
        assert (
            await node.post("/v1/chat/completions", json=chat("native", max_tokens=TOKENS))
        ).status_code == 200
        assert (
            await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=MARK)
        ).status_code == 200
        assert (await lane(node))["restore_model"] is None


async def test_helper_decision_rows(harness: RouterHarness) -> None:
    """In process, to read the node's decision log: a node (a master, which may be lent work
    like any node) with `fast` generating one borrowed request and holding another; an own
    request hands the waiting one back and waits behind the one in the backend."""
    harness.faults_for_model["fast"] = f"--token-rate 20 --tokens {TOKENS} --parallel 1"
    harness.model("fast", contextsize=4096)
    base = harness.settings()
    cluster = base.cluster.model_copy(
        update={"role": "master", "node_id": "m", "token": TOKEN, "scheduling_backend_depth": 1}
    )
    node = await harness.start(base.model_copy(update={"cluster": cluster}))
    assert harness.app is not None
    log = harness.app[LENDING].decisions
    assert (
        await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=MARK)
    ).status_code == 200
    first = asyncio.create_task(
        node.post(NODE_CHAT, json=chat("fast", max_tokens=100), headers=MARK)
    )
    assert await until(field(node, "active"), 1, deadline=30)
    # Each lent request names its owner (the lending master sets the header); two owners here,
    # one with a slash in its model ID. A malformed owner is refused with 400.
    bad = {**MARK, OWNER: "s1"}
    r = await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=bad)
    assert r.status_code == 400 and OWNER in r.json()["error"]["message"], r.text
    owners = [("s1", "slow"), ("s9", "org/big")]
    held = [
        asyncio.create_task(
            node.post(
                NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers={**MARK, OWNER: f"{n}/{m}"}
            )
        )
        for n, m in owners
    ]
    assert await until(field(node, "held_borrowed"), 2, deadline=30)
    assert list(log.newest(10)) == []  # borrowed arrivals alone decide nothing
    own = asyncio.create_task(
        node.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
    )
    for returned in await asyncio.gather(*held):
        assert returned.status_code == 409, returned.text
        assert returned.json()["error"]["code"] == "offload_returned"
    rows = [d.to_dict() for d in log.newest(10)]
    for r in rows:
        assert r["kind"] == "helper" and r["lane"] == "text"
        assert (r["helper_node_id"], r["helper_model_id"]) == ("m", "fast")
    # One `borrowed_returned` row per owner whose work went back, with that owner's count.
    back = {
        (r["owner_node_id"], r["owner_model_id"]): r["detail"]
        for r in rows
        if r["outcome"] == "borrowed_returned"
    }
    assert back == {o: {"returned": 1, "borrowed_in_backend": 1} for o in owners}
    # The wait behind admitted borrowed work names no owner; it counts everything returned.
    waited = [r for r in rows if r["outcome"] == "native_waited_behind_borrowed"]
    assert [(r["owner_node_id"], r["owner_model_id"], r["detail"]) for r in waited] == [
        ("", "", {"returned": 2, "borrowed_in_backend": 1})
    ]
    assert (await first).status_code == 200 and (await own).status_code == 200
    # An own request with nothing borrowed on the lane records nothing more.
    assert (
        await node.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
    ).status_code == 200
    assert len(list(log.newest(10))) == 3


async def test_a_wait_in_the_gate_is_bounded_by_the_queue_timeout(harness: RouterHarness) -> None:
    """Behind a long borrowed job, with `runtime.queue_timeout` 1 s: a waiting borrowed
    request goes back to its owner (409), a waiting own request gets the queue timeout (503)."""
    harness.faults_for_model["fast"] = f"--token-rate 20 --tokens {TOKENS} --parallel 1"
    harness.model("fast", contextsize=4096)
    base = harness.settings(queue_timeout=1)
    cluster = base.cluster.model_copy(
        update={"role": "master", "node_id": "m", "token": TOKEN, "scheduling_backend_depth": 1}
    )
    node = await harness.start(base.model_copy(update={"cluster": cluster}))
    # Loaded by an explicit load, bounded by the load: a cold start through a request would
    # itself be a 1 s queue wait, which a busy machine's backend start outlasts.
    assert (await node.post("/router/v1/load", json={"model": "fast"})).status_code == 200
    assert (
        await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=MARK)
    ).status_code == 200
    first = asyncio.create_task(
        node.post(NODE_CHAT, json=chat("fast", max_tokens=2000), headers=MARK)
    )
    # 100 s in the backend: it holds the slot until it is cancelled below, however slowly
    # the two waits run on a busy machine.
    assert await until(field(node, "active"), 1, deadline=30)
    late = await node.post(NODE_CHAT, json=chat("fast", max_tokens=TOKENS), headers=MARK)
    assert late.status_code == 409 and late.json()["error"]["code"] == "offload_returned"
    own = await node.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
    assert own.status_code == 503 and "runtime.queue_timeout" in own.text
    assert (await lane(node))["queued"] == 0  # nobody left waiting
    first.cancel()  # the owner gives up on the long one: its slot comes back
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await until(field(node, "active"), 0, deadline=30)
    assert (
        await node.post("/v1/chat/completions", json=chat("fast", max_tokens=TOKENS))
    ).status_code == 200
