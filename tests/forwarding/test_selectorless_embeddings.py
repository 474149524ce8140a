"""Embeddings without a model on one router (the contract's Embedding APIs section, issue 23):
the loaded embedding runtime; with none loaded, the default embedding backend (a loaded
runtime that answers embeddings for its own model: vLLM's) without loading anything; with
none of those, a 400 in the surface's shape naming the embedding models. The same rule on
OpenAI `/v1/embeddings` and Ollama's `/api/embed` and `/api/embeddings` (the official
`ollama` client always names one, so those requests are raw HTTP; fake backends through the
real supervisor)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import ollama
import pytest

from tests.support.harness import RouterHarness

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def base(h: RouterHarness) -> str:
    assert h.server is not None
    return str(h.server.make_url("")).rstrip("/")


async def _load(client: httpx.AsyncClient, model: str) -> None:
    reply = await client.post("/v1/chat/completions", json={**CHAT, "model": model})
    assert reply.status_code == 200, reply.text


async def test_a_loaded_vllm_text_model_takes_unnamed_embeddings(harness: RouterHarness) -> None:
    """No embedding configuration is loaded: the running vLLM runtime (a pooling model is
    configured as `model_param`) answers, and the unloaded embedding model stays unloaded."""
    harness.model("bge", mode="vllm")
    harness.model("emb", embeddingsmodel="emb.gguf")
    client = await harness.start()
    await _load(client, "bge")
    reply = await client.post("/v1/embeddings", json={"input": ["a", "b"]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "bge" and len(reply.json()["data"]) == 2
    assert reply.headers["x-fake-model"].endswith("bge.gguf")
    embedded = await client.post("/api/embed", json={"input": "a", "model": ""})
    assert embedded.status_code == 200, embedded.text
    assert embedded.json()["model"] == "bge" and len(embedded.json()["embeddings"]) == 1
    # Named, it is refused: a selected configuration must advertise an embedding component.
    with pytest.raises(ollama.ResponseError, match="no embedding component"):
        await ollama.AsyncClient(host=base(harness)).embed(model="bge", input="a")
    legacy = await client.post("/api/embeddings", json={"prompt": "a"})
    assert legacy.status_code == 200 and legacy.json()["embedding"], legacy.text
    # KoboldCpp's own route: vLLM does not implement it, so nothing serves it.
    kobold = await client.post("/api/extra/embeddings", json={"input": "a"})
    assert kobold.status_code == 400
    assert kobold.json()["detail"]["msg"].endswith("embedding models: emb")  # Kobold's shape
    assert harness.runtimes.spawn_count == 1


async def test_a_loaded_embedding_model_goes_before_the_default(harness: RouterHarness) -> None:
    harness.model("bge", mode="vllm")
    harness.model("emb", embeddingsmodel="emb.gguf")
    client = await harness.start()
    await _load(client, "bge")
    named = await client.post("/v1/embeddings", json={"model": "emb", "input": "a"})
    assert named.status_code == 200, named.text
    for path, body in (("/v1/embeddings", {"input": "a"}), ("/api/embed", {"input": "a"})):
        reply = await client.post(path, json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == "emb"
        assert reply.headers["x-fake-model"].endswith("emb.gguf")
    assert harness.runtimes.spawn_count == 2


async def test_nothing_that_serves_embeddings_is_a_400_naming_the_models(
    harness: RouterHarness,
) -> None:
    """A llama-server text runtime answers no embeddings (started without --embeddings): the
    router refuses in each surface's shape and loads nothing."""
    harness.model("chat")
    harness.model("emb", embeddingsmodel="emb.gguf")
    harness.model("emb-2", embeddingsmodel="emb-2.gguf")
    client = await harness.start()
    await _load(client, "chat")
    reply = await client.post("/v1/embeddings", json={"input": "a"})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "model"
    assert error["message"].endswith("embedding models: emb, emb-2")
    embed = await client.post("/api/embed", json={"input": "a"})
    assert embed.status_code == 400 and "emb, emb-2" in embed.json()["error"]
    legacy = await client.post("/api/embeddings", json={"model": None, "prompt": "a"})
    assert legacy.status_code == 400 and set(legacy.json()) == {"error"}
    assert harness.runtimes.spawn_count == 1


async def test_nothing_loaded_loads_nothing(harness: RouterHarness) -> None:
    harness.model("emb", embeddingsmodel="emb.gguf")
    client = await harness.start()
    for path in ("/v1/embeddings", "/api/embed"):
        reply = await client.post(path, json={"input": "a"})
        assert reply.status_code == 400 and "emb" in reply.text, reply.text
    # Ollama's empty request (a load) names nothing to load: nothing is loaded.
    empty = await client.post("/api/embed", json={})
    assert empty.status_code == 400
    assert harness.runtimes.spawn_count == 0


async def test_a_header_names_the_model_of_an_ollama_embed(harness: RouterHarness) -> None:
    """The contract's selectors apply to /api/embed: a named model loads as usual."""
    harness.model("emb", embeddingsmodel="emb.gguf")
    client = await harness.start()
    reply = await client.post("/api/embed", json={"input": "a"}, headers={"X-Tensors-Model": "emb"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "emb"
    by_query = await client.post("/api/embed?model=emb", json={"input": "b"})
    assert by_query.status_code == 200 and by_query.json()["model"] == "emb"


async def test_an_unnamed_ollama_embed_arriving_in_pieces(harness: RouterHarness) -> None:
    """A large body written in several pieces with pauses, as real clients send them."""
    harness.model("bge", mode="vllm")
    client = await harness.start()
    await _load(client, "bge")
    texts = [f"text {i} " + "x" * 2000 for i in range(64)]
    body = json.dumps({"input": texts, "truncate": True}).encode()

    async def pieces() -> AsyncIterator[bytes]:
        step = len(body) // 5 + 1
        for start in range(0, len(body), step):
            yield body[start : start + step]
            # A client's pause between pieces (pacing, nothing is polled): long enough that
            # the router reads each piece on its own.
            await asyncio.sleep(0.1)

    reply = await client.post(
        "/api/embed", content=pieces(), headers={"Content-Type": "application/json"}
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "bge" and len(reply.json()["embeddings"]) == len(texts)
    assert harness.runtimes.spawn_count == 1
