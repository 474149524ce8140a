"""The cluster memory tests' set-up (tests/cluster/test_cluster_memory.py, test_cluster_lane_fit.py):
a master with no models and two slaves (real `tensor-router start` processes, fake backends)
whose models are real demo GGUFs, so the estimates are real. s1 has `chat` and `filler`, s2
`chat`; s1 holds the filler, so a chat load there would evict it, and the master should send
the chat requests to s2."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from router.demo_models import write_llama_gguf
from tests.support.cluster import AUTH, Cluster, cluster, served_models, start_all
from tests.support.harness import RouterHarness, until


def gguf(tmp: Path, seed: int) -> bytes:
    path = tmp / f"demo-{seed}.gguf"
    write_llama_gguf(path, seed=seed, name=f"chat {seed}")
    return path.read_bytes()


async def row(client: httpx.AsyncClient, model_id: str) -> dict[str, Any] | None:
    """`model_id`'s row of the master's GET /router/v1/models, if listed."""
    data = (await client.get("/router/v1/models")).json()["data"]
    return next((m for m in data if m["id"] == model_id), None)


async def chat_replicas(client: httpx.AsyncClient) -> list[str]:
    """The nodes the master lists a `chat` replica on (one per slave whose snapshot it holds)."""
    found = await row(client, "chat")
    return sorted(r["node_id"] for r in (found or {}).get("replicas", []))


@dataclass
class FillerCluster:
    cluster: Cluster
    http: httpx.AsyncClient  # for the slaves' node routes (full URLs)
    client: httpx.AsyncClient  # the master's


@contextlib.asynccontextmanager
async def filler_on_s1(
    h: RouterHarness, slave_sections: dict[str, Any]
) -> AsyncIterator[FillerCluster]:
    """The cluster started (`slave_sections` over each slave's settings), the master holding
    both slaves' snapshots (`chat` with a replica on each), the filler loaded on s1 over its
    node route; the processes are the harness's to stop.

    The filler's measured memory comes in s1's snapshot alone, and a busy machine can leave
    the master without s2's first snapshot for seconds after that; the tests read s2's replica
    and devices and count on a choice between both slaves."""
    chat, filler = gguf(h.tmp, 1), gguf(h.tmp, 2)
    c = cluster(
        h, {}, {"chat": chat, "filler": filler}, {"chat": chat}, slave_sections=slave_sections
    )
    await start_all(c)
    async with (
        httpx.AsyncClient(timeout=30) as http,
        httpx.AsyncClient(base_url=c.master.base, timeout=30) as client,
    ):
        assert await until(lambda: chat_replicas(client), ["s1", "s2"]), await row(client, "chat")
        r = await http.post(
            c.slaves[0].base + "/router/v1/node/load", json={"model": "filler"}, headers=AUTH
        )
        assert r.status_code == 200, r.text
        yield FillerCluster(c, http, client)


async def assert_chat_goes_to_s2(f: FillerCluster) -> None:
    """Four chat requests through the master all served by s2; s1 still holds only the filler.

    Chosen by rotation alone, they would alternate between s1 and s2, and s1 would stop the
    filler to load the chat model."""
    s1, s2 = f.cluster.slaves
    for _ in range(4):
        reply = await f.client.post(
            "/v1/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert reply.status_code == 200, reply.text
    assert await until(lambda: served_models(s2), ["chat"])
    assert "chat" not in await served_models(s1)
    state = (await f.http.get(s1.base + "/router/v1/node/state", headers=AUTH)).json()
    assert [r["model"] for r in state["runtimes"]] == ["filler"]
