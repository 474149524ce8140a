"""A master and slaves as `tensor-router start` processes on loopback (tests/cluster,
tests/lending, tests/real, tests/ui): their configurations, start-up and what their stores
recorded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiohttp.test_utils import TestServer

import router.app
from router.config import Settings
from router.edge import listener
from tests.support.harness import RouterHarness, free_port
from tests.support.router_process import RouterProcess, new_router

TOKEN = "cluster-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def node_configs(h: RouterHarness, name: str, models: dict[str, bytes]) -> Path:
    folder = h.tmp / f"kcpps-{name}"
    files = h.tmp / f"models-{name}"
    folder.mkdir()
    files.mkdir()
    for model_id, content in models.items():
        (files / f"{model_id}.gguf").write_bytes(content)
        body = {"backend_mode": "llama_sdcpp", "model_param": str(files / f"{model_id}.gguf")}
        (folder / f"{model_id}.kcpps").write_text(json.dumps(body))
    return folder


@dataclass
class Cluster:
    master: RouterProcess
    slaves: list[RouterProcess]


def cluster(
    h: RouterHarness,
    master_models: dict[str, bytes],
    *slave_models: dict[str, bytes],
    health_interval: float = 0.3,
    slave_sections: dict[str, Any] | None = None,
    slave_kcpps: list[Path] | None = None,
) -> Cluster:
    master_port = free_port()
    slave_ports = [free_port() for _ in slave_models]
    urls = [f"http://127.0.0.1:{p}" for p in slave_ports]
    master = new_router(
        h,
        name="master",
        port=master_port,
        kcpps_dir=node_configs(h, "master", master_models),
        extra={
            "cluster": {
                "role": "master",
                "node_id": "m",
                "token": TOKEN,
                "public_url": f"http://127.0.0.1:{master_port}",
                "slave_urls": urls,
                "health_interval": health_interval,
            }
        },
    )
    slaves = []
    for i, (port, models) in enumerate(zip(slave_ports, slave_models, strict=True)):
        name = f"s{i + 1}"
        slaves.append(
            new_router(
                h,
                name=name,
                port=port,
                kcpps_dir=slave_kcpps[i] if slave_kcpps else node_configs(h, name, models),
                extra={
                    **(slave_sections or {}),
                    "cluster": {
                        "role": "slave",
                        "node_id": name,
                        "token": TOKEN,
                        "public_url": urls[i],
                        "master_url": f"http://127.0.0.1:{master_port}",
                        "sync_interval": 0.5,
                    },
                },
            )
        )
    return Cluster(master, slaves)


async def start_all(c: Cluster) -> None:
    await c.master.start()
    for s in c.slaves:
        await s.start()


async def listed_ids(client: httpx.AsyncClient) -> list[str]:
    reply = await client.get("/v1/models")
    assert reply.status_code == 200, reply.text
    return sorted(m["id"] for m in reply.json()["data"])


async def ps_names(client: httpx.AsyncClient) -> list[str]:
    return sorted(m["name"] for m in (await client.get("/api/ps")).json()["models"])


async def served_models(node: RouterProcess) -> list[str]:
    """The models this node's own store recorded requests for (read from its SQLite file)."""
    if node.name == "master":
        async with httpx.AsyncClient(base_url=node.base, timeout=10) as client:
            await client.post("/router/v1/site/analytics/flush")
    path = node.h.tmp / f"data-{node.name}" / "router.sqlite"

    def read() -> list[str]:
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT DISTINCT model FROM analytics_events WHERE model IS NOT NULL")
            return sorted(r[0] for r in rows)

    try:
        return await asyncio.to_thread(read)
    except sqlite3.Error:
        return []


async def served_rows(node: RouterProcess) -> list[str]:
    """One model ID per request this node's store recorded."""
    path = node.h.tmp / f"data-{node.name}" / "router.sqlite"

    def read() -> list[str]:
        with sqlite3.connect(path) as db:
            return [r[0] for r in db.execute("SELECT model FROM analytics_events")]

    try:
        return await asyncio.to_thread(read)
    except sqlite3.Error:
        return []


def _slave_section(url: str, master_port: int) -> dict[str, Any]:
    return {
        "role": "slave",
        "node_id": "s1",
        "token": TOKEN,
        "public_url": url,
        "master_url": f"http://127.0.0.1:{master_port}",
        "sync_interval": 0.5,
    }


async def slave_of(h: RouterHarness, master_port: int, models: dict[str, bytes]) -> str:
    """A slave `s1` process with `models`, registering with the master at `master_port`; its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    section = _slave_section(url, master_port)
    slave = new_router(
        h, name="s1", port=port, kcpps_dir=node_configs(h, "s1", models), extra={"cluster": section}
    )
    await slave.start()
    return url


@contextlib.asynccontextmanager
async def master_here(
    h: RouterHarness, port: int, slave_url: str, **sections: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A master `m` (model `a`, `sections` over the harness settings) served by this process,
    so a test can spy on its handlers (router.app.HANDLERS, patched before this starts); a
    client of it."""
    h.model("a")
    base = h.settings().model_dump(mode="json") | sections
    base["cluster"] = {
        "role": "master",
        "node_id": "m",
        "token": TOKEN,
        "public_url": f"http://127.0.0.1:{port}",
        "slave_urls": [slave_url],
        "health_interval": 0.3,
    }
    async with served_here(Settings.model_validate(base), port) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            yield c


@contextlib.asynccontextmanager
async def slave_here(h: RouterHarness, port: int, master_port: int) -> AsyncIterator[str]:
    """A slave `s1` (model `b`) served by this process, registering with the master at
    `master_port` (tests/tracing: one in-memory exporter sees both nodes); its URL."""
    url = f"http://127.0.0.1:{port}"
    base = h.settings().model_dump(mode="json")
    base["models"]["config_dir"] = str(node_configs(h, "s1", {"b": b"GGUF"}))
    base["analytics"]["database_path"] = str(h.tmp / "s1" / "router.sqlite")
    base["cluster"] = _slave_section(url, master_port)
    async with served_here(Settings.model_validate(base), port) as served:
        yield served


@contextlib.asynccontextmanager
async def served_here(settings: Settings, port: int) -> AsyncIterator[str]:
    """A router app on `port` in this process; its base URL."""
    server = TestServer(
        router.app.create_app(settings),
        host="127.0.0.1",
        port=port,
        **listener.runner_kwargs(settings),
    )
    await server.start_server()
    try:
        yield server.make_url("").human_repr()
    finally:
        await server.close()
