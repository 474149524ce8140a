"""Two routers that lend to each other on loopback (tests/lending, tests/ui): the master owns
`slow` (a fake backend at 20 tokens/s, one generation at a time), the slave has `fast` (200
tokens/s, one at a time); their configurations, the lending routes and what they report."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.cluster import TOKEN, served_rows
from tests.support.harness import RouterHarness, chat, free_port
from tests.support.router_process import RouterProcess, new_router

TEXT_LINKS = "/router/v1/site/text-routing-groups"
N = 12  # concurrent requests per run
TOKENS = 8
SUMMARY = "/router/v1/site/offload/summary"
# Short lease and refit clocks, so a test sees a lease run out and fits appear.
QUICK = {"scheduling_grant_ttl": 2, "scheduling_refresh_interval": 1}


def folder(h: RouterHarness, name: str, models: dict[str, dict[str, Any]]) -> Path:
    """Each model's .kcpps with its own settings (contextsize, parallel, ...)."""
    kcpps, files = h.tmp / f"kcpps-{name}", h.tmp / f"models-{name}"
    kcpps.mkdir()
    files.mkdir()
    for model_id, fields in models.items():
        (files / f"{model_id}.gguf").write_bytes(model_id.encode())
        component = "sdmodel" if fields.pop("image", False) else "model_param"
        body = {"backend_mode": "llama_sdcpp", component: str(files / f"{model_id}.gguf")}
        (kcpps / f"{model_id}.kcpps").write_text(json.dumps(body | fields))
    return kcpps


def speeds(h: RouterHarness) -> None:
    h.faults_for_model.update(
        {
            "slow": f"--token-rate 20 --tokens {TOKENS} --parallel 1",
            "fast": f"--token-rate 200 --tokens {TOKENS} --parallel 1",
        }
    )


def master_node(
    h: RouterHarness,
    port: int,
    slave_urls: list[str],
    models: dict[str, dict[str, Any]],
    tune: dict[str, Any] = QUICK,
) -> RouterProcess:
    return new_router(
        h,
        name="master",
        port=port,
        kcpps_dir=folder(h, "master", models),
        extra={
            "cluster": {
                "role": "master",
                "node_id": "m",
                "token": TOKEN,
                "slave_urls": slave_urls,
                "public_url": f"http://127.0.0.1:{port}",
                "health_interval": 0.3,
                **tune,
            },
            "analytics": {
                "database_path": str(h.tmp / "data-master" / "router.sqlite"),
                "flush_interval": 0.2,
            },
        },
    )


def slave_node(
    h: RouterHarness,
    name: str,
    port: int,
    master_port: int,
    models: dict[str, dict[str, Any]],
    tune: dict[str, Any] = QUICK,
) -> RouterProcess:
    url = f"http://127.0.0.1:{port}"
    return new_router(
        h,
        name=name,
        port=port,
        kcpps_dir=folder(h, name, models),
        extra={
            "cluster": {
                "role": "slave",
                "node_id": name,
                "token": TOKEN,
                "public_url": url,
                "master_url": f"http://127.0.0.1:{master_port}",
                "sync_interval": 0.5,
                **tune,
            },
            "analytics": {
                "database_path": str(h.tmp / f"data-{name}" / "router.sqlite"),
                "flush_interval": 0.2,
            },
        },
    )


def two_nodes(h: RouterHarness) -> tuple[RouterProcess, RouterProcess]:
    speeds(h)
    mport, sport = free_port(), free_port()
    master_models = {
        "slow": {"contextsize": 4096},
        "other": {"contextsize": 4096},
        "pic": {"image": True},
    }
    master = master_node(h, mport, [f"http://127.0.0.1:{sport}"], master_models)
    slave_models = {
        "fast": {"contextsize": 8192},
        "tiny": {"contextsize": 1024},
        "wide": {"contextsize": 8192, "parallel": 4},
        "nocx": {},
        "pic2": {"image": True},
    }
    return master, slave_node(h, "s1", sport, mport, slave_models)


async def candidates(client: httpx.AsyncClient, model: str, node: str = "m") -> dict[str, Any]:
    reply = await client.get(TEXT_LINKS, params={"node_id": node, "model_id": model})
    assert reply.status_code == 200, reply.text
    return reply.json()


async def slave_known(client: httpx.AsyncClient) -> bool:
    found = await candidates(client, "slow")
    return any(c["node_id"] == "s1" for c in found["candidates"])


LINK = {
    "anchor": {"node_id": "m", "model_id": "slow"},
    "lends_to": [{"node_id": "s1", "model_id": "fast"}],
}


async def burst(client: httpx.AsyncClient, stream: bool = False) -> tuple[float, list[int]]:
    """N concurrent requests for `slow`; the time until all completed and their statuses."""

    async def one() -> int:
        if stream:
            async with client.stream(
                "POST", "/v1/chat/completions", json=chat("slow", stream=True, max_tokens=TOKENS)
            ) as r:
                text = (await r.aread()).decode()
                assert r.status_code != 200 or "[DONE]" in text
                return r.status_code
        r = await client.post("/v1/chat/completions", json=chat("slow", max_tokens=TOKENS))
        assert r.status_code != 200 or r.json()["model"] == "slow", r.text
        return r.status_code

    started = time.monotonic()
    statuses = await asyncio.gather(*(one() for _ in range(N)))
    return time.monotonic() - started, list(statuses)


async def summary_leases(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    reply = await client.get(SUMMARY)
    assert reply.status_code == 200, reply.text
    leases: list[dict[str, Any]] = reply.json()["leases"]
    return leases


async def samples(client: httpx.AsyncClient, node: str, model: str) -> bool:
    """The summary shows a job time fitted from at least one of `model`'s requests on `node`."""
    reply = await client.get(SUMMARY)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert {n["node_id"] for n in body["nodes"]} == {"m", "s1"}
    return any(
        c["node_id"] == node
        and c["model_id"] == model
        and c["samples"] >= 1
        and c["job_s"] is not None
        and c["job_s"] > 0
        and c["fitted"] == (c["samples"] >= 20)
        for c in body["costs"]
    )


async def leases_during(client: httpx.AsyncClient, running: asyncio.Task[Any]) -> list[Any]:
    """The first non-empty lease list the summary shows while `running` runs."""
    while not running.done():
        leases = await summary_leases(client)
        if leases:
            return leases
        await asyncio.sleep(0.05)
    return []


async def rows(client: httpx.AsyncClient, node: RouterProcess, model: str) -> int:
    flushed = await client.post("/router/v1/site/analytics/flush")
    assert flushed.status_code == 200, flushed.text
    return (await served_rows(node)).count(model)
