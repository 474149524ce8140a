"""Pooled memory, the lending node's own load (docs/cluster.md, "The lending node's own need
for the memory"): a lease's bytes count in the node's ledger, so under `residency: memory` a
load of the node's own model that needs them waits; the lease's end wakes that load at once
(before, nothing ran the node's pump on a lease's end, and the request waited to its queue
timeout). With the master down, asking it back fails and the lease stays to its reclaim
deadline: it is released here over the node API, as the master's unload does. With the master
up but holding no runtime on the lease (it was granted here by hand), the master answers 409
and the node ends the lease at once: its own load starts far before the deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from backends.base import built_backends_dir
from router.cluster.pooled.lender import RPC_PROGRAMS
from router.demo_models import write_llama_gguf
from tests.support.cluster import AUTH, Cluster, cluster, start_all
from tests.support.harness import RouterHarness, until
from tests.support.pooled import port_range, rpc_servers

pytestmark = [pytest.mark.real, pytest.mark.timeout(240)]
LEASES = "/router/v1/node/rpc/leases"
MIB = 1 << 20
WAKE_BOUND = 30.0  # far below runtime.queue_timeout (10 min): only the wake-up meets it


@pytest.fixture
def h(tmp_harness: RouterHarness) -> Iterator[RouterHarness]:
    if not any((built_backends_dir() / "bin" / name).exists() for name in RPC_PROGRAMS):
        pytest.fail("llama.cpp's RPC server is not built: run `make llama-server`", pytrace=False)
    yield tmp_harness


ASK = {"master_id": "m", "node_id": "s1", "model": "big", "bytes": 30 * MIB}
BODY = {"model": "chat", "prompt": "Hi", "max_tokens": 2}


def _cluster(h: RouterHarness, reclaim_timeout: float) -> Cluster:
    low, high = port_range()
    chat = write_llama_gguf(h.tmp / "own-chat.gguf", seed=3, name="own chat").read_bytes()
    pooled = {"lend": True, "bind": "127.0.0.1", "port_min": low, "port_max": high}
    sections = {
        "pooled": pooled | {"reclaim_timeout": reclaim_timeout},
        "memory": {"host_budget": "48MiB"},  # the ~30 MiB chat model fits only without the lease
        "runtime": {"residency": "memory", "stop_grace": 1, "load_timeout": 20},
    }
    return cluster(h, {}, {"chat": chat}, slave_sections=sections)


async def test_a_lease_ending_starts_the_node_own_load_that_waited_for_its_bytes(
    h: RouterHarness,
) -> None:
    c = _cluster(h, reclaim_timeout=600)
    await start_all(c)
    c.master.kill()  # nobody to give the lease back: it stays until released here
    slave = c.slaves[0]
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=120) as node:
        granted = await node.post(LEASES, json=ASK)
        assert granted.status_code == 200, granted.text
        own = asyncio.create_task(node.post("/v1/completions", json=BODY))

        async def queued() -> int:
            return int((await node.get("/router/v1/status")).json()["queued"]["text"])

        assert await until(queued, 1, deadline=30)  # it waits: the lease holds its bytes
        assert not own.done()
        lease_id = granted.json()["lease_id"]
        released = await node.post(f"{LEASES}/{lease_id}/release", json={"master_id": "m"})
        assert released.status_code == 200, released.text
        reply = await asyncio.wait_for(own, WAKE_BOUND)
        assert reply.status_code == 200, reply.text
        assert rpc_servers(slave) == []


async def test_a_master_holding_nothing_on_the_lease_lets_the_node_take_it_at_once(
    h: RouterHarness,
) -> None:
    c = _cluster(h, reclaim_timeout=600)  # the deadline would hold the load ten minutes
    await start_all(c)
    slave = c.slaves[0]
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=120) as node:
        granted = await node.post(LEASES, json=ASK)
        assert granted.status_code == 200, granted.text
        reply = await asyncio.wait_for(node.post("/v1/completions", json=BODY), WAKE_BOUND)
        assert reply.status_code == 200, reply.text
        assert (await node.get(LEASES)).json()["leases"] == [] and rpc_servers(slave) == []
