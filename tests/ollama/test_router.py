"""Ollama clients through the router to an OpenAI-only backend (translation), with the official
`ollama` Python client, against fake llama-server processes launched by the real supervisor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import ollama
import pytest

from tests.support.harness import RouterHarness, harness_fixture


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[RouterHarness]:
    async for h in harness_fixture(tmp_path):
        h.model("chat-a")
        h.model("embed", embeddingsmodel="embed.gguf")
        await h.start()
        yield h


def client_for(h: RouterHarness) -> ollama.AsyncClient:
    assert h.server is not None
    return ollama.AsyncClient(host=str(h.server.make_url("")).rstrip("/"))


async def test_ollama_chat_non_streamed(harness: RouterHarness) -> None:
    reply = await client_for(harness).chat(
        model="chat-a", messages=[{"role": "user", "content": "hi"}], stream=False
    )
    assert reply.model == "chat-a"
    assert reply.done is True and reply.done_reason in ("stop", "length")
    assert reply.message.role == "assistant" and reply.message.content
    assert reply.total_duration and reply.total_duration > 0


async def test_ollama_chat_streamed_ndjson(harness: RouterHarness) -> None:
    parts = [
        part
        async for part in await client_for(harness).chat(
            model="chat-a", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    ]
    assert len(parts) >= 2
    assert all(p.model == "chat-a" for p in parts)
    assert parts[-1].done is True and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content or "" for p in parts)


async def test_ollama_generate(harness: RouterHarness) -> None:
    reply = await client_for(harness).generate(model="chat-a", prompt="hello", stream=False)
    assert reply.model == "chat-a" and reply.done and reply.response


async def test_ollama_embed(harness: RouterHarness) -> None:
    reply = await client_for(harness).embed(model="embed", input=["a", "b"])
    assert reply.model == "embed"
    assert len(reply.embeddings) == 2 and len(reply.embeddings[0]) > 0


async def test_ollama_refusals_are_in_ollama_shape(harness: RouterHarness) -> None:
    assert harness.client is not None
    r = await harness.client.post(
        "/api/generate", json={"model": "chat-a", "prompt": "x", "suffix": "y"}
    )
    assert r.status_code == 400 and set(r.json()) == {"error"}
    r = await harness.client.post("/api/chat", json={"model": "nope", "messages": []})
    assert r.status_code == 404 and r.json() == {"error": 'model "nope" was not found'}
    r = await harness.client.post("/api/embed", json={"model": "chat-a", "input": "x"})
    assert r.status_code == 400 and "embedding" in r.json()["error"]


async def test_ollama_load_request_loads_without_generating(harness: RouterHarness) -> None:
    assert harness.client is not None
    r = await harness.client.post("/api/generate", json={"model": "chat-a"})
    assert r.status_code == 200 and r.json()["done_reason"] == "load"
    assert harness.runtimes.status_of("chat-a") == "ready"
    ps = (await harness.client.get("/api/ps")).json()
    assert [m["name"] for m in ps["models"]] == ["chat-a"]
