"""Pooled memory, the lending node takes its memory back (docs/cluster.md, "The lending
node's own need for the memory"): a master with `spread` over slave s1 (the fake llama-server
on the master, llama.cpp's real RPC server on the node), and on s1 a model of its own whose
load fits s1's budget only without the lease. The node's own request asks the master to
unload `spread`: it loads within a bound far below the node's reclaim deadline, the master
shows no remote device, and no RPC server or port of the range is left (the node's dry run
of that load names the lease beforehand). A master that cannot unload in time (a stream
still running) loses the lease at the deadline: its stream ends with an error event, never
`[DONE]`, and the node's own load goes ahead."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from router.cluster.pooled.borrower import layer_bytes
from router.cluster.pooled.ports import open_ports
from router.demo_models import generate_text_models, write_kcpps
from router.memory.shape import read_shape
from tests.support.cluster import AUTH
from tests.support.harness import RouterHarness, until
from tests.support.pooled import (
    CONTEXT,
    past_first_event,
    port_range,
    require_rpc_server,
    rpc_servers,
    s1_available,
    spread_pair,
)
from tests.support.router_process import RouterProcess

pytestmark = [pytest.mark.real, pytest.mark.timeout(240)]
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
OWN_BOUND = 30.0  # the own load's wait, asked back; the reclaim deadline is twice that


async def _pair(
    h: RouterHarness, tmp_path: Path, reclaim_timeout: float
) -> tuple[RouterProcess, RouterProcess, tuple[int, int]]:
    """Master and node, started; the node's own `own` (the same file) needs the lent bytes:
    its host budget is the larger of the lease and the own load's need plus half the smaller."""
    require_rpc_server()
    model = generate_text_models(tmp_path / "models")["chat-a"]
    ports = port_range()
    slave_extra: dict[str, Any] = {
        "pooled": {"reclaim_timeout": reclaim_timeout},
        "runtime": {"residency": "memory", "stop_grace": 1, "load_timeout": 20},
    }
    master, slave = spread_pair(h, model, ports, slave_extra=slave_extra)
    write_kcpps(h.tmp / "kcpps-s1" / "own.kcpps", model_param=model, contextsize=CONTEXT)
    await master.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=60) as client:
        dry = await client.post("/router/v1/load", json={"model": "solo", "dry_run": True})
        assert dry.status_code == 200, dry.text
    (row,) = [r for r in dry.json()["devices"] if r["device"] == "host"]
    shape = read_shape(str(model))
    assert shape is not None
    lease = 2 * layer_bytes(shape, CONTEXT)[1]  # the master's budget holds one of three layers
    need = int(row["estimate"])
    config = yaml.safe_load(slave.config.read_text())
    config["memory"] = {"host_budget": max(lease, need) + min(lease, need) // 2}
    slave.config.write_text(yaml.safe_dump(config))
    await slave.start()
    return master, slave, ports


async def _spread_loaded(client: httpx.AsyncClient, slave: RouterProcess) -> None:
    assert await until(lambda: s1_available(client), True, deadline=30)
    reply = await client.post("/v1/chat/completions", json={**CHAT, "model": "spread"})
    assert reply.status_code == 200, reply.text
    assert len(rpc_servers(slave)) == 1


async def _released(
    client: httpx.AsyncClient, slave: RouterProcess, ports: tuple[int, int]
) -> bool:
    status = (await client.get("/router/v1/status")).json()
    return status["remote_devices"] == [] and rpc_servers(slave) == [] and not open_ports(*ports)


async def test_the_node_own_load_asks_the_master_to_unload_and_loads(
    tmp_harness: RouterHarness, tmp_path: Path
) -> None:
    h = tmp_harness
    master, slave, ports = await _pair(h, tmp_path, reclaim_timeout=2 * OWN_BOUND)
    async with (
        httpx.AsyncClient(base_url=master.base, timeout=60) as client,
        httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=120) as node,
    ):
        await _spread_loaded(client, slave)
        # The node's dry run of its own load names the lease it would ask back.
        (lease,) = (await node.get("/router/v1/node/rpc/leases")).json()["leases"]
        dry = await node.post("/router/v1/load", json={"model": "own", "dry_run": True})
        assert dry.status_code == 200, dry.text
        assert dry.json()["fits"] is False and dry.json()["reclaim"] == [
            {"lease_id": lease["lease_id"], "master_id": "m", "model": "spread"}
            | {"bytes": lease["bytes"]}
        ]
        assert len(rpc_servers(slave)) == 1  # a dry run asks nothing back
        started = time.monotonic()
        own = await asyncio.wait_for(
            node.post("/v1/chat/completions", json={**CHAT, "model": "own"}), OWN_BOUND
        )
        assert own.status_code == 200, own.text
        assert time.monotonic() - started < OWN_BOUND  # the master unloaded: no deadline met
        assert await until(lambda: _released(client, slave, ports), True, deadline=20)
        runtimes = (await client.get("/router/v1/status")).json()["runtimes"]
        assert not any("spread" in row["runtime"] for row in runtimes), runtimes
        # The node stayed healthy: the spread model loads again once the node has room.
        assert await s1_available(client)


async def test_a_master_that_cannot_unload_in_time_loses_the_lease_at_the_deadline(
    tmp_harness: RouterHarness, tmp_path: Path
) -> None:
    h = tmp_harness
    h.faults["llamacpp"] = "--token-rate 20"  # a 400-token stream runs 20 s
    deadline = 3.0
    master, slave, ports = await _pair(h, tmp_path, reclaim_timeout=deadline)
    body = {**CHAT, "model": "spread", "stream": True, "max_tokens": 400}
    async with (
        httpx.AsyncClient(base_url=master.base, timeout=60) as client,
        httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=120) as node,
    ):
        assert await until(lambda: s1_available(client), True, deadline=30)
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            await past_first_event(lines)
            own = asyncio.create_task(
                node.post("/v1/chat/completions", json={**CHAT, "model": "own"})
            )
            rest = [line async for line in lines]
        data = [line for line in rest if line.startswith("data:")]
        assert data and "error" in data[-1] and "data: [DONE]" not in data, rest[-4:]
        reply = await asyncio.wait_for(own, OWN_BOUND)
        assert reply.status_code == 200, reply.text
        assert await until(lambda: _released(client, slave, ports), True, deadline=20)
