"""Selectorless embeddings across a cluster, continued (issue 23): Ollama's `/api/embed` and
`/api/embeddings` rotate like `/v1/embeddings`; with no embedding runtime loaded anywhere,
the default embedding backend of any node (a loaded vLLM text runtime) takes the request
without a load; with none of those either, the master's 400 names every node's embedding
models. `tensor-router start` processes with fake backends."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.cluster.test_selectorless_embeddings import embedding_config
from tests.support.cluster import cluster, ps_names, served_rows, start_all
from tests.support.harness import RouterHarness, until

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def config(h: RouterHarness, node: str, model_id: str, **fields: Any) -> None:
    """A configuration in `node`'s folders: `fields` name model files by their keys."""
    body: dict[str, Any] = {"backend_mode": fields.pop("backend_mode", "llama_sdcpp")}
    for key, stem in fields.items():
        weights = h.tmp / f"models-{node}" / f"{stem}.gguf"
        weights.write_bytes(b"GGUF" + stem.encode())
        body[key] = str(weights)
    (h.tmp / f"kcpps-{node}" / f"{model_id}.kcpps").write_text(json.dumps(body))


async def _ids(client: httpx.AsyncClient) -> list[str]:
    reply = await client.get("/router/v1/models")
    return sorted(m["id"] for m in reply.json()["data"])


async def _ok(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await client.post(path, json=body)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


async def test_unnamed_ollama_embeddings_rotate_over_every_node(
    tmp_harness: RouterHarness,
) -> None:
    c = cluster(tmp_harness, {}, {})
    embedding_config(tmp_harness, "master", "emb-m")
    embedding_config(tmp_harness, "s1", "emb-1")
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: _ids(client), ["emb-1", "emb-m"])
        for model in ("emb-m", "emb-1"):
            await _ok(client, "/v1/embeddings", {"model": model, "input": "a"})
        assert await until(lambda: ps_names(client), ["emb-1", "emb-m"])
        models = [(await _ok(client, "/api/embed", {"input": "a"}))["model"] for _ in range(4)]
        assert sorted(models) == ["emb-1", "emb-1", "emb-m", "emb-m"]
        legacy = await _ok(client, "/api/embeddings", {"prompt": "a"})
        assert legacy["embedding"]
        assert await ps_names(client) == ["emb-1", "emb-m"]


async def test_the_default_embedding_backend_of_a_slave_takes_it(
    tmp_harness: RouterHarness,
) -> None:
    """Nothing with an embedding component is loaded; a slave runs a vLLM model: it answers
    unnamed embeddings, and the master's embedding model is not loaded for them."""
    c = cluster(tmp_harness, {}, {})
    embedding_config(tmp_harness, "master", "emb-m")
    config(tmp_harness, "s1", "bge", backend_mode="vllm", model_param="bge")
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: _ids(client), ["bge", "emb-m"])
        await _ok(client, "/v1/chat/completions", {**CHAT, "model": "bge"})
        assert await until(lambda: ps_names(client), ["bge"])
        assert (await _ok(client, "/v1/embeddings", {"input": "a"}))["model"] == "bge"
        assert (await _ok(client, "/api/embed", {"input": "a"}))["model"] == "bge"
        assert await ps_names(client) == ["bge"]

    async def rows() -> int:
        return len(await served_rows(c.slaves[0]))

    assert await until(rows, 3), await rows()  # the chat and both embeddings: s1's


async def test_a_text_only_runtime_of_an_embedding_configuration_is_not_in_the_rotation(
    tmp_harness: RouterHarness,
) -> None:
    """s1's configuration has an embedding model but only its text runtime runs: unnamed
    embeddings go to s2's loaded embedding runtime every time (s1 would refuse them)."""
    c = cluster(tmp_harness, {}, {}, {})
    config(tmp_harness, "s1", "both", model_param="chat", embeddingsmodel="embed")
    embedding_config(tmp_harness, "s2", "emb-2")
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: _ids(client), ["both", "emb-2"])
        await _ok(client, "/v1/chat/completions", {**CHAT, "model": "both"})
        await _ok(client, "/v1/embeddings", {"model": "emb-2", "input": "a"})
        assert await until(lambda: ps_names(client), ["both", "emb-2"])
        for path in ("/v1/embeddings",) * 4 + ("/api/embed",) * 2:
            assert (await _ok(client, path, {"input": "a"}))["model"] == "emb-2"


async def test_nothing_anywhere_is_a_400_naming_every_nodes_embedding_models(
    tmp_harness: RouterHarness,
) -> None:
    c = cluster(tmp_harness, {}, {"chat": b"GGUFchat"})
    embedding_config(tmp_harness, "master", "emb-m")
    embedding_config(tmp_harness, "s1", "emb-1")
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: _ids(client), ["chat", "emb-1", "emb-m"])
        await _ok(client, "/v1/chat/completions", {**CHAT, "model": "chat"})
        assert await until(lambda: ps_names(client), ["chat"])
        reply = await client.post("/v1/embeddings", json={"input": "a"})
        assert reply.status_code == 400
        assert reply.json()["error"]["message"].endswith("embedding models: emb-1, emb-m")
        ollama = await client.post("/api/embed", json={"input": "a"})
        assert ollama.status_code == 400
        assert ollama.json()["error"].endswith("embedding models: emb-1, emb-m")
        assert await ps_names(client) == ["chat"]
