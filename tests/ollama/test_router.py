"""Ollama clients through the router to an OpenAI-only backend (translation), with the official
`ollama` Python client, against fake llama-server processes launched by the real supervisor."""

from __future__ import annotations

import pytest

from tests.support.harness import RouterHarness
from tests.support.ollama import client_for


@pytest.fixture
async def router(harness: RouterHarness) -> RouterHarness:
    harness.model("chat-a")
    harness.model("embed", embeddingsmodel="embed.gguf")
    await harness.start()
    return harness


async def test_ollama_chat_non_streamed(router: RouterHarness) -> None:
    reply = await client_for(router).chat(
        model="chat-a", messages=[{"role": "user", "content": "hi"}], stream=False
    )
    assert reply.model == "chat-a"
    assert reply.done is True and reply.done_reason in ("stop", "length")
    assert reply.message.role == "assistant" and reply.message.content
    assert reply.total_duration and reply.total_duration > 0


async def test_ollama_chat_streamed_ndjson(router: RouterHarness) -> None:
    parts = [
        part
        async for part in await client_for(router).chat(
            model="chat-a", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    ]
    assert len(parts) >= 2
    assert all(p.model == "chat-a" for p in parts)
    assert parts[-1].done is True and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content or "" for p in parts)


async def test_ollama_generate(router: RouterHarness) -> None:
    reply = await client_for(router).generate(model="chat-a", prompt="hello", stream=False)
    assert reply.model == "chat-a" and reply.done and reply.response


async def test_ollama_embed(router: RouterHarness) -> None:
    reply = await client_for(router).embed(model="embed", input=["a", "b"])
    assert reply.model == "embed"
    assert len(reply.embeddings) == 2 and len(reply.embeddings[0]) > 0


async def test_ollama_refusals_are_in_ollama_shape(router: RouterHarness) -> None:
    assert router.client is not None
    r = await router.client.post(
        "/api/generate", json={"model": "chat-a", "prompt": "x", "suffix": "y"}
    )
    assert r.status_code == 400 and set(r.json()) == {"error"}
    r = await router.client.post("/api/chat", json={"model": "nope", "messages": []})
    assert r.status_code == 404 and r.json() == {"error": 'model "nope" was not found'}
    r = await router.client.post("/api/embed", json={"model": "chat-a", "input": "x"})
    assert r.status_code == 400 and "embedding" in r.json()["error"]


async def test_ollama_load_request_loads_without_generating(router: RouterHarness) -> None:
    assert router.client is not None
    r = await router.client.post("/api/generate", json={"model": "chat-a"})
    assert r.status_code == 200 and r.json()["done_reason"] == "load"
    assert router.runtimes.status_of("chat-a") == "ready"
    ps = (await router.client.get("/api/ps")).json()
    assert [m["name"] for m in ps["models"]] == ["chat-a"]
