"""Pooled memory, the lending node's side (docs/cluster.md, "Pooled memory"): a master and a
slave as `tensor-router start` processes on loopback, the slave lending through llama.cpp's
real RPC server. While a lease lives exactly one RPC server runs, owned by the slave's
router, bound to the cluster address only; a release or an expiry stops it and leaves no port
of the range open; every lease the rules forbid is refused by name."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from backends.base import built_backends_dir
from router.cluster.pooled.lender import RPC_PROGRAMS
from router.cluster.pooled.ports import open_ports
from router.demo_models import generate_text_models
from tests.support.cluster import AUTH, cluster, start_all
from tests.support.harness import RouterHarness, until
from tests.support.pooled import (
    past_first_event,
    port_range,
    rpc_servers,
    s1_available,
    spread_pair,
)
from tests.support.router_process import RouterProcess

LEASES = "/router/v1/node/rpc/leases"
MIB = 1 << 20


@pytest.fixture
def h(tmp_harness: RouterHarness) -> Iterator[RouterHarness]:
    if not any((built_backends_dir() / "bin" / name).exists() for name in RPC_PROGRAMS):
        pytest.fail("llama.cpp's RPC server is not built: run `make llama-server`", pytrace=False)
    yield tmp_harness


async def _lend(h: RouterHarness, **pooled: Any) -> tuple[RouterProcess, RouterProcess]:
    section = {"lend": True, "bind": "127.0.0.1", "lease_ttl": 30, **pooled}
    c = cluster(h, {}, {}, slave_sections={"pooled": section})
    await start_all(c)
    return c.master, c.slaves[0]


def _ask(**change: Any) -> dict[str, Any]:
    return {"master_id": "m", "node_id": "s1", "model": "big", "bytes": 64 * MIB, **change}


async def test_a_lease_runs_one_rpc_server_on_the_cluster_address_until_released(
    h: RouterHarness,
) -> None:
    low, high = port_range()
    master, slave = await _lend(h, port_min=low, port_max=high)
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=60) as node:
        granted = await node.post(LEASES, json=_ask())
        assert granted.status_code == 200, granted.text
        lease = granted.json()
        host, port = lease["endpoint"].rsplit(":", 1)
        assert host == "127.0.0.1" and low <= int(port) <= high
        servers = rpc_servers(slave)
        assert len(servers) == 1 and rpc_servers(master) == []
        # Bound to the cluster address alone, never every address.
        assert open_ports(low, high) == [("127.0.0.1", int(port))]
        cmd = servers[0].cmdline()
        assert cmd[cmd.index("-H") + 1] == "127.0.0.1" and "-c" in cmd
        listed = (await node.get(LEASES)).json()
        assert [row["lease_id"] for row in listed["leases"]] == [lease["lease_id"]]
        assert listed["leases"][0]["pid"] == servers[0].pid

        second_master = await node.post(LEASES, json=_ask(master_id="m2"))
        assert second_master.status_code == 409 and "master m" in second_master.text
        stolen = await node.post(f"{LEASES}/{lease['lease_id']}/renew", json={"master_id": "m2"})
        assert stolen.status_code == 409 and "another master" in stolen.text
        kept = await node.post(f"{LEASES}/{lease['lease_id']}/renew", json={"master_id": "m"})
        assert kept.status_code == 200 and kept.json()["state"] == "granted"

        ended = await node.post(f"{LEASES}/{lease['lease_id']}/release", json={"master_id": "m"})
        assert ended.status_code == 200 and ended.json()["state"] == "released"
        assert rpc_servers(slave) == [] and open_ports(low, high) == []
        again = await node.post(f"{LEASES}/{lease['lease_id']}/renew", json={"master_id": "m"})
        assert again.status_code == 409


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_id": "elsewhere"}, "names node elsewhere"),
        ({"bytes": 1 << 60}, "this node can lend"),
        ({"port": 80}, "outside this node's RPC range"),
    ],
)
async def test_leases_the_rules_forbid_are_refused_and_start_nothing(
    h: RouterHarness, change: dict[str, Any], message: str
) -> None:
    low, high = port_range()
    master, slave = await _lend(h, port_min=low, port_max=high)
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=60) as node:
        refused = await node.post(LEASES, json=_ask(**change))
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "lease_refused"
        assert message in refused.json()["error"]["message"]
    assert rpc_servers(slave) == [] and open_ports(low, high) == []
    async with httpx.AsyncClient(base_url=master.base, headers=AUTH, timeout=60) as off:
        # Lending is off by default: the master's own node lends nothing.
        refused = await off.post(LEASES, json=_ask(node_id="m"))
        assert refused.status_code == 409 and "pooled.lend" in refused.text


async def test_an_expired_lease_stops_its_server_and_cannot_be_renewed(h: RouterHarness) -> None:
    low, high = port_range()
    _, slave = await _lend(h, port_min=low, port_max=high, lease_ttl=1)
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=60) as node:
        lease = (await node.post(LEASES, json=_ask())).json()
        assert len(rpc_servers(slave)) == 1

        async def count() -> int:
            return len((await node.get(LEASES)).json()["leases"])

        assert await until(count, 0, deadline=20)  # no renewal: it ends on the node's clock
        assert await until(lambda: _none(slave), True, deadline=10)
        assert open_ports(low, high) == []
        late = await node.post(f"{LEASES}/{lease['lease_id']}/renew", json={"master_id": "m"})
        assert late.status_code == 409


async def _none(slave: RouterProcess) -> bool:
    return rpc_servers(slave) == []


async def test_a_master_leases_launches_with_rpc_and_releases_on_unload(
    h: RouterHarness, tmp_path: Path
) -> None:
    """The master's side with the fake llama-server (it takes any flags): the lease comes
    before the launch, the endpoint and split reach argv, the unload releases the lease."""
    model = generate_text_models(tmp_path / "models")["chat-a"]
    ports = port_range()
    master, slave = spread_pair(h, model, ports)
    await slave.start()
    await master.start()
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with httpx.AsyncClient(base_url=master.base, timeout=60) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        reply = await client.post("/v1/chat/completions", json={**chat, "model": "spread"})
        assert reply.status_code == 200, reply.text
        (server,) = rpc_servers(slave)
        port = int(server.cmdline()[server.cmdline().index("-p") + 1])
        argv = _backend_argv(master)
        # Three layers of which the master's budget holds one: two go to the node.
        assert argv[argv.index("--rpc") + 1] == f"127.0.0.1:{port}"
        assert argv[argv.index("-ngl", argv.index("--rpc")) + 1] == "2"
        assert argv[argv.index("-ts") + 1] == "2"
        status = (await client.get("/router/v1/status")).json()
        assert [d["node_id"] for d in status["remote_devices"]] == ["s1"]
        node_view = (await client.get(f"{slave.base}{LEASES}", headers=AUTH)).json()
        assert [row["model"] for row in node_view["leases"]] == ["spread"]

        solo = await client.post("/v1/chat/completions", json={**chat, "model": "solo"})
        assert solo.status_code == 200  # the lane's swap stops `spread`: its lease ends

        async def released() -> bool:
            return rpc_servers(slave) == [] and open_ports(*ports) == []

        assert await until(released, True, deadline=20)
        assert "--rpc" not in _backend_argv(master)
        assert (await client.get("/router/v1/status")).json()["remote_devices"] == []


async def test_a_model_naming_a_node_outside_the_cluster_is_refused_by_name(
    h: RouterHarness, tmp_path: Path
) -> None:
    model = generate_text_models(tmp_path / "models")["chat-a"]
    ports = port_range()
    master, slave = spread_pair(h, model, ports, nodes=["s1", "ghost"])
    await slave.start()
    await master.start()
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "model": "spread"}
    async with httpx.AsyncClient(base_url=master.base, timeout=60) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        refused = await client.post("/v1/chat/completions", json=chat)
        assert refused.status_code == 503 and "ghost" in refused.json()["error"]["message"]
    assert rpc_servers(slave) == []


def _backend_argv(master: RouterProcess) -> list[str]:
    """The argv of the master's one backend process (the fake llama-server)."""
    found = []
    for pid in master.descendants():
        try:
            argv = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        if any(word.endswith("fake_backend.py") for word in argv):
            found.append(argv)
    (argv,) = found
    return argv


async def test_a_partitioned_lending_node_stops_the_runtime_and_ends_its_stream(
    h: RouterHarness, tmp_path: Path
) -> None:
    """A node that stops answering (frozen: no byte, no error) cannot renew: the master stops
    the runtime (llama.cpp would block on the lost socket), the stream in flight ends with an
    error event, and the next request is refused naming the node."""
    h.faults["llamacpp"] = "--tokens 400 --token-rate 20"
    model = generate_text_models(tmp_path / "models")["chat-a"]
    fast = {"control_timeout": 1}
    master, slave = spread_pair(h, model, port_range(), master_cluster=fast)
    await slave.start()
    await master.start()
    body = {"model": "spread", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with httpx.AsyncClient(base_url=master.base, timeout=60) as client:
        assert await until(lambda: s1_available(client), True, deadline=30)
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            await past_first_event(lines)
            started = time.monotonic()
            os.kill(slave.pid, signal.SIGSTOP)
            try:
                rest = [line async for line in lines]
            finally:
                ended = time.monotonic() - started
        data = [line for line in rest if line.startswith("data:")]
        assert data and "error" in data[-1] and "data: [DONE]" not in data, rest[-4:]
        assert ended < 15  # a renewal period (2 s) and the control timeout, with room
        refused = await client.post("/v1/chat/completions", json={**body, "stream": False})
        assert refused.status_code == 503 and "s1" in refused.text
    os.kill(slave.pid, signal.SIGCONT)
