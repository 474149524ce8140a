"""Selectorless embeddings across a cluster (the contract's Embedding APIs section): with no
model named, the master round-robins over the *loaded* embedding runtimes of every node, its
own included, and never loads a model for the guess."""

from __future__ import annotations

import json

import httpx

from tests.support.cluster import cluster, ps_names, served_rows, start_all
from tests.support.harness import RouterHarness, until

TEXT = {"input": "hello"}


def embedding_config(h: RouterHarness, node: str, model_id: str) -> None:
    """An embeddings configuration in `node`'s folders (made by cluster())."""
    weights = h.tmp / f"models-{node}" / f"{model_id}.gguf"
    weights.write_bytes(b"GGUF" + model_id.encode())
    body = {"backend_mode": "llama_sdcpp", "embeddingsmodel": str(weights)}
    (h.tmp / f"kcpps-{node}" / f"{model_id}.kcpps").write_text(json.dumps(body))


async def _ids(client: httpx.AsyncClient) -> list[str]:
    reply = await client.get("/router/v1/models")
    return sorted(m["id"] for m in reply.json()["data"])


async def _loaded(client: httpx.AsyncClient) -> list[str]:
    """Loaded on any node, as the master's /api/ps shows once a poll has seen it."""
    return await ps_names(client)


async def test_unnamed_embeddings_rotate_over_loaded_runtimes_of_every_node(
    tmp_harness: RouterHarness,
) -> None:
    c = cluster(tmp_harness, {}, {}, {})
    embedding_config(tmp_harness, "master", "emb-m")
    embedding_config(tmp_harness, "s1", "emb-1")
    embedding_config(tmp_harness, "s2", "emb-2")  # never loaded: never chosen, never loaded
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: _ids(client), ["emb-1", "emb-2", "emb-m"])
        for model in ("emb-m", "emb-1"):  # named: loads it
            reply = await client.post("/v1/embeddings", json={**TEXT, "model": model})
            assert reply.status_code == 200, reply.text
        assert await until(lambda: _loaded(client), ["emb-1", "emb-m"])
        for _ in range(4):
            reply = await client.post("/v1/embeddings", json=TEXT)
            assert reply.status_code == 200, reply.text
        assert await _loaded(client) == ["emb-1", "emb-m"]

    async def counts() -> list[int]:
        return [len(await served_rows(s)) for s in c.slaves]

    # s1: its named request and half of the four unnamed ones; s2: nothing.
    assert await until(counts, [3, 0]), await counts()


async def test_unnamed_embeddings_go_to_the_only_node_with_one_loaded(
    tmp_harness: RouterHarness,
) -> None:
    """The master has an embedding configuration but none loaded: the slave's loaded one
    answers (it was a 400 before), and the master's is not loaded."""
    c = cluster(tmp_harness, {}, {})
    embedding_config(tmp_harness, "master", "emb-m")
    embedding_config(tmp_harness, "s1", "emb-1")
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: _ids(client), ["emb-1", "emb-m"])
        reply = await client.post("/v1/embeddings", json={**TEXT, "model": "emb-1"})
        assert reply.status_code == 200, reply.text
        assert await until(lambda: _loaded(client), ["emb-1"])
        for _ in range(2):
            reply = await client.post("/v1/embeddings", json=TEXT)
            assert reply.status_code == 200, reply.text
        assert await _loaded(client) == ["emb-1"]
