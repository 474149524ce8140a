"""A vLLM gang's test set-up (tests/cluster/test_vllm_gang.py): a master whose `big` names
follower node s1 (`router_vllm_nodes`), and s1 lending with its own file of `big`, both
`tensor-router start` processes on loopback running the fake vLLM; and what the tests look
at (the follower and head processes a router runs)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from tests.support.cluster import TOKEN
from tests.support.harness import RouterHarness, free_port
from tests.support.pooled import port_range
from tests.support.router_process import RouterProcess, new_router

MODEL = "big"


def _kcpps(folder: Path, model: Path, **extra: object) -> Path:
    folder.mkdir()
    body = {"backend_mode": "vllm", "model_param": str(model), "contextsize": 512, **extra}
    (folder / f"{MODEL}.kcpps").write_text(json.dumps(body))
    return folder


def gang_pair(h: RouterHarness, lease_ttl: float = 6) -> tuple[RouterProcess, RouterProcess]:
    """Master `m` (its head's rendezvous port from its own `pooled` range) and node `s1`."""
    model = h.tmp / "weights" / "big.safetensors"
    model.parent.mkdir()
    model.write_bytes(b"fake weights")
    master_port, slave_port = free_port(), free_port()
    slave_url = f"http://127.0.0.1:{slave_port}"
    common = {"token": TOKEN, "health_interval": 0.5}
    low, high = port_range()
    master = new_router(
        h,
        name="master",
        port=master_port,
        kcpps_dir=_kcpps(h.tmp / "kcpps-master", model, router_vllm_nodes=["s1"]),
        extra={
            "pooled": {"bind": "127.0.0.1", "port_min": low, "port_max": high},
            "cluster": common
            | {"role": "master", "node_id": "m", "slave_urls": [slave_url]}
            | {"public_url": f"http://127.0.0.1:{master_port}"},
        },
    )
    low, high = port_range()
    slave = new_router(
        h,
        name="s1",
        port=slave_port,
        kcpps_dir=_kcpps(h.tmp / "kcpps-s1", model),
        extra={
            "pooled": {"lend": True, "port_min": low, "port_max": high, "lease_ttl": lease_ttl},
            "cluster": common
            | {"role": "slave", "node_id": "s1", "public_url": slave_url}
            | {"master_url": f"http://127.0.0.1:{master_port}", "sync_interval": 0.5},
        },
    )
    return master, slave


def _running(node: RouterProcess) -> list[psutil.Process]:
    found = []
    for pid in node.descendants():
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE and "--model" in process.cmdline():
                found.append(process)
        except psutil.Error:
            continue
    return found


def followers(node: RouterProcess) -> list[list[str]]:
    """The argv of every headless vLLM follower the router runs."""
    return [p.cmdline() for p in _running(node) if "--headless" in p.cmdline()]


def heads(node: RouterProcess) -> list[list[str]]:
    """The argv of every vLLM the router runs that serves the API (not headless)."""
    return [p.cmdline() for p in _running(node) if "--headless" not in p.cmdline()]


def listeners(node: RouterProcess) -> dict[str, list[str]]:
    """Per vLLM process the router runs (`head` or `follower`), the addresses it listens on."""
    found: dict[str, list[str]] = {}
    for process in _running(node):
        role = "follower" if "--headless" in process.cmdline() else "head"
        sockets = process.net_connections(kind="tcp")
        found[role] = [c.laddr.ip for c in sockets if c.status == psutil.CONN_LISTEN]
    return found


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]
