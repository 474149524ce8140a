"""Text-side behaviour through the router with fake backends: jinja_kwargs profiles sharing a
runtime, embeddings round-robin without a selector, and routes a backend does not serve."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from router.errors import BadRequest
from router.jinja import merge_chat_template_kwargs
from tests.harness import RouterHarness, chat
from tests.proctree import live_descendants


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[RouterHarness]:
    h = RouterHarness(tmp_path)
    yield h
    await h.close()
    await asyncio.sleep(0.05)
    assert live_descendants() == []


def test_merge_precedence_and_refusals() -> None:
    body = json.dumps(
        {"messages": [], "chat_template_kwargs": {"enable_thinking": False, "x": None}}
    )
    merged = json.loads(
        merge_chat_template_kwargs(body.encode(), {"enable_thinking": True}, "config")
    )
    assert merged["chat_template_kwargs"] == {"enable_thinking": True}
    merged = json.loads(
        merge_chat_template_kwargs(body.encode(), {"enable_thinking": True}, "client")
    )
    assert merged["chat_template_kwargs"] == {"enable_thinking": False}
    with pytest.raises(BadRequest):
        merge_chat_template_kwargs(b'{"chat_template_kwargs": 3}', {"a": 1}, "config")
    with pytest.raises(BadRequest):
        merge_chat_template_kwargs(
            b'{"chat_template_kwargs": {}, "chat_template_kwargs": {}}', {"a": 1}, "config"
        )
    assert merge_chat_template_kwargs(b'{"a": 1}', {}, "config") == b'{"a": 1}'


async def test_jinja_profiles_share_one_runtime(harness: RouterHarness) -> None:
    harness.model("think", model_param="qwen.gguf", jinja_kwargs={"enable_thinking": True})
    harness.model("nothink", model_param="qwen.gguf", jinja_kwargs={"enable_thinking": False})
    client = await harness.start()
    for model in ("think", "nothink", "think"):
        r = await client.post("/v1/chat/completions", json=chat(model))
        assert r.status_code == 200, r.text
        assert r.json()["model"] == model
    assert harness.runtimes.spawn_count == 1


async def test_embeddings_without_model_use_the_loaded_runtime_only(harness: RouterHarness) -> None:
    harness.model("embed", embeddingsmodel="bge.gguf")
    client = await harness.start()
    r = await client.post("/v1/embeddings", json={"input": "x"})
    assert r.status_code == 400 and "no embedding model is loaded" in r.json()["error"]["message"]
    assert harness.runtimes.spawn_count == 0
    r = await client.post("/v1/embeddings", json={"model": "embed", "input": "x"})
    assert r.status_code == 200, r.text
    r = await client.post("/v1/embeddings", json={"input": "x"})
    assert r.status_code == 200 and r.json()["model"] == "embed"
    assert harness.runtimes.spawn_count == 1


async def test_a_route_the_backend_does_not_serve_names_the_route_to_use(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    client = await harness.start()
    r = await client.post("/v1/embeddings", json={"model": "chat-a", "input": "x"})
    assert r.status_code == 400
    assert "/v1/chat/completions" in r.json()["error"]["message"]
    assert harness.runtimes.spawn_count == 0


async def test_chat_requires_a_model(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    r = await client.post("/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400 and "chat-a" in r.json()["error"]["message"]
