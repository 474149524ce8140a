"""Pooled memory's test set-up (tests/real/test_pooled_*.py): a master with a model spread
over a lending slave, both `tensor-router start` processes on loopback, and what the tests
look at (the RPC servers a router runs, the ports of a range)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from backends.base import built_backends_dir
from router.cluster.pooled.borrower import layer_bytes
from router.cluster.pooled.lender import RPC_PROGRAMS
from router.cluster.pooled.ports import open_ports
from router.demo_models import write_kcpps
from router.memory.shape import read_shape
from tests.support.cluster import TOKEN
from tests.support.harness import RouterHarness, free_port
from tests.support.router_process import RouterProcess, new_router

CONTEXT = 512


def port_range() -> tuple[int, int]:
    """Four ports nothing listens on now (a free port and the three after it)."""
    while True:
        low = free_port()
        if low + 3 < 65536 and not open_ports(low, low + 3):
            return low, low + 3


def rpc_servers(node: RouterProcess) -> list[psutil.Process]:
    found = []
    for pid in node.descendants():
        try:
            process = psutil.Process(pid)
            if os.path.basename(process.exe()) in RPC_PROGRAMS:
                found.append(process)
        except psutil.Error:
            continue
    return found


def spread_pair(
    h: RouterHarness,
    model: Path,
    ports: tuple[int, int],
    llama: dict[str, Any] | None = None,
    nodes: list[str] | None = None,
    master_cluster: dict[str, Any] | None = None,
    master_extra: dict[str, Any] | None = None,
    slave_extra: dict[str, Any] | None = None,
    master_runtime: dict[str, Any] | None = None,
) -> tuple[RouterProcess, RouterProcess]:
    """Master `m` with `solo` (the file alone) and `spread` (router_rpc_nodes: `nodes`, s1 by
    default), its host budget one and a half layers; slave `s1` lending on loopback in
    `ports`. `llama`: the master's llama section (the real llama-server), else the fake;
    `master_extra`: more top-level sections of the master's YAML (analytics); `slave_extra`:
    the slave's (its `pooled` keys go over the defaults here); `master_runtime`: the master's
    `runtime` keys (`residency: memory`)."""
    shape = read_shape(str(model))
    assert shape is not None
    _, size = layer_bytes(shape, CONTEXT)
    kcpps = h.tmp / "kcpps-master"
    write_kcpps(kcpps / "solo.kcpps", model_param=model, contextsize=CONTEXT)
    extra = {"router_rpc_nodes": nodes or ["s1"]}
    write_kcpps(kcpps / "spread.kcpps", model_param=model, contextsize=CONTEXT, extra=extra)
    (h.tmp / "kcpps-s1").mkdir()
    master_port, slave_port = free_port(), free_port()
    slave_url = f"http://127.0.0.1:{slave_port}"
    common = {"token": TOKEN, "health_interval": 0.5}
    own = {"role": "master", "node_id": "m", "slave_urls": [slave_url], **(master_cluster or {})}
    master = new_router(
        h,
        name="master",
        port=master_port,
        kcpps_dir=kcpps,
        extra={
            **({"llama": llama} if llama else {}),
            "memory": {"host_budget": size * 3 // 2},
            "cluster": common | own | {"public_url": f"http://127.0.0.1:{master_port}"},
            **(master_extra or {}),
        },
        **(master_runtime or {}),
    )
    slave_cluster = {"role": "slave", "node_id": "s1", "public_url": slave_url}
    slave = new_router(
        h,
        name="s1",
        port=slave_port,
        kcpps_dir=h.tmp / "kcpps-s1",
        extra={
            **(slave_extra or {}),
            "pooled": {"lend": True, "port_min": ports[0], "port_max": ports[1], "lease_ttl": 6}
            | (slave_extra or {}).get("pooled", {}),
            "cluster": common
            | slave_cluster
            | {"master_url": f"http://127.0.0.1:{master_port}", "sync_interval": 0.5},
        },
    )
    return master, slave


async def s1_available(client: httpx.AsyncClient) -> bool:
    nodes = (await client.get("/router/v1/site/inventory")).json()["nodes"]
    return any(n.get("node_id") == "s1" and n.get("available") for n in nodes)


def require_rpc_server() -> None:
    if not any((built_backends_dir() / "bin" / name).exists() for name in RPC_PROGRAMS):
        pytest.fail("llama.cpp's RPC server is not built: run `make llama-server`", pytrace=False)


async def past_first_event(lines: AsyncIterator[str]) -> None:
    """Read a stream's lines up to its first `data:` event (the answer is under way)."""
    first = await anext(lines)
    while not first.startswith("data:"):
        first = await anext(lines)
