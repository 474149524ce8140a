"""vLLM multi-node (docs/cluster.md, "vLLM multi-node"): a master and a lending node as
`tensor-router start` processes on loopback, both running the fake vLLM. A model naming the
node in `router_vllm_nodes` loads as a gang: the node runs exactly one headless follower
under a `vllm` lease, started by its own router with rank 1 and the master's rendezvous
address, the master's head gets rank 0 and the same address, a chat answers through the
master, and after the unload no follower is left."""

from __future__ import annotations

from typing import Any

import httpx
import psutil
import pytest

from tests.support.cluster import AUTH
from tests.support.harness import RouterHarness, until
from tests.support.pooled import s1_available
from tests.support.router_process import RouterProcess, gone
from tests.support.vllm_gang import MODEL, flag, followers, gang_pair, heads, listeners

LEASES = "/router/v1/node/rpc/leases"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def test_a_vllm_model_with_one_follower_node_loads_answers_and_unloads(
    tmp_harness: RouterHarness,
) -> None:
    master, slave = gang_pair(tmp_harness)
    await slave.start()
    await master.start()
    async with (
        httpx.AsyncClient(base_url=master.base, timeout=120) as client,
        httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=60) as node,
    ):
        assert await until(lambda: s1_available(client), True, deadline=30)
        dry = await client.post("/router/v1/load", json={"model": MODEL, "dry_run": True})
        assert dry.status_code == 200, dry.text
        planned = dry.json()["pooled"]
        assert planned["engine"] == "vllm" and planned["nnodes"] == 2
        assert [(n["node_id"], n["node_rank"]) for n in planned["nodes"]] == [("s1", 1)]
        # The master's own memory decision counts the head's part (its part of the weights
        # beside its KV space and process), not the whole: the part each follower leases.
        host = next(d for d in dry.json()["devices"] if d["device"] == "host")
        assert host["estimate"] == planned["nodes"][0]["bytes"], (host, planned)
        assert followers(slave) == []  # nothing runs before a lease (a dry run leases none)

        answer = await client.post("/v1/chat/completions", json=CHAT)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]

        (follower,) = followers(slave)
        assert followers(master) == [] and heads(slave) == []
        (head,) = heads(master)
        port = flag(head, "--master-port")
        assert [flag(head, f) for f in ("--nnodes", "--node-rank", "--master-addr")] == [
            "2",
            "0",
            "127.0.0.1",
        ]
        assert [flag(follower, f) for f in ("--nnodes", "--node-rank", "--master-addr")] == [
            "2",
            "1",
            "127.0.0.1",
        ]
        assert flag(follower, "--master-port") == port
        assert flag(follower, "--model") == flag(head, "--model")
        # The follower serves no API: no listener of its own; nothing listens on 0.0.0.0.
        assert "--host" not in follower and "--port" not in follower
        assert listeners(slave) == {"follower": []}
        assert listeners(master) == {"head": ["127.0.0.1"]}

        (lease,) = (await node.get(LEASES)).json()["leases"]
        assert lease["kind"] == "vllm" and lease["model"] == MODEL
        assert lease["endpoint"] is None and lease["bytes"] > 0
        status = (await client.get("/router/v1/status")).json()
        (device,) = status["remote_devices"]
        assert device["node_id"] == "s1" and device["lease_id"] == lease["lease_id"]

        unloaded = await client.post("/router/v1/unload", json={"target": "all"})
        assert unloaded.status_code == 200, unloaded.text

        async def none_left() -> bool:
            leases = (await node.get(LEASES)).json()["leases"]
            return followers(slave) == [] and leases == []

        assert await until(none_left, True, deadline=30)
        assert heads(master) == []


def _ask(**change: Any) -> dict[str, Any]:
    gang = {"nnodes": 2, "node_rank": 1, "master_addr": "127.0.0.1", "master_port": 50999}
    body = {"master_id": "m", "node_id": "s1", "model": MODEL, "bytes": 1 << 20, "kind": "vllm"}
    return body | gang | change


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"master_addr": "0.0.0.0"}, 409, "master_addr '0.0.0.0' is refused"),  # noqa: S104
        ({"master_addr": "head --x"}, 409, "is refused"),
        ({"node_rank": 0}, 409, "node_rank is 1 to 1"),
        ({"model": "other"}, 409, "no vLLM model 'other'"),
        ({"port": 50100}, 409, "no port"),
        ({"kind": "ray"}, 400, "kind must be rpc or vllm"),
    ],
)
async def test_the_node_refuses_a_vllm_lease_it_must_not_run_and_starts_nothing(
    tmp_harness: RouterHarness, change: dict[str, Any], status: int, message: str
) -> None:
    _, slave = gang_pair(tmp_harness)
    await slave.start()
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=60) as node:
        refused = await node.post(LEASES, json=_ask(**change))
        assert refused.status_code == status, refused.text
        assert message in refused.json()["error"]["message"]
        assert (await node.get(LEASES)).json()["leases"] == []
    assert followers(slave) == []


async def test_a_follower_that_exits_at_once_fails_its_lease_and_holds_nothing(
    tmp_harness: RouterHarness,
) -> None:
    tmp_harness.faults["vllm"] = "--exit-at-start 3"
    _, slave = gang_pair(tmp_harness)
    await slave.start()
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=60) as node:
        before = (await node.get(LEASES)).json()["room"]
        failed = await node.post(LEASES, json=_ask())
        assert failed.status_code == 503, failed.text
        assert "the vLLM follower exited at once" in failed.json()["error"]["message"]
        after = (await node.get(LEASES)).json()
        assert after["leases"] == [] and after["room"] == before
    assert followers(slave) == []


async def test_a_vllm_lease_nobody_renews_stops_its_follower(tmp_harness: RouterHarness) -> None:
    _, slave = gang_pair(tmp_harness, lease_ttl=2)
    await slave.start()
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=60) as node:
        granted = await node.post(LEASES, json=_ask())
        assert granted.status_code == 200, granted.text
        lease = granted.json()
        assert lease["kind"] == "vllm" and lease["endpoint"] is None
        (follower,) = followers(slave)
        assert flag(follower, "--master-port") == "50999"

        async def stopped() -> bool:
            return followers(slave) == []

        assert await until(stopped, True, deadline=30)
        renewed = await node.post(f"{LEASES}/{lease['lease_id']}/renew", json={"master_id": "m"})
        assert renewed.status_code == 409


async def test_losing_the_follower_node_stops_the_head_and_a_request_gets_a_clear_error(
    tmp_harness: RouterHarness,
) -> None:
    master, slave = gang_pair(tmp_harness, lease_ttl=3)
    await slave.start()
    await master.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        answer = await client.post("/v1/chat/completions", json=CHAT)
        assert answer.status_code == 200, answer.text
        (follower,) = _follower_pids(slave)
        slave.kill()  # its follower dies with it (the supervisor's death signal)

        async def head_stopped() -> bool:
            return heads(master) == [] and gone(follower)

        assert await until(head_stopped, True, deadline=30)
        refused = await client.post("/v1/chat/completions", json=CHAT)
        assert refused.status_code == 503, refused.text
        assert "s1" in refused.json()["error"]["message"]


def _follower_pids(node: RouterProcess) -> list[int]:
    return [pid for pid in node.descendants() if "--headless" in psutil.Process(pid).cmdline()]
