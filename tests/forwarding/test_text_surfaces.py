"""Text-side behaviour through the router with fake backends: jinja_kwargs profiles sharing a
runtime, embeddings round-robin without a selector, and routes a backend does not serve."""

from __future__ import annotations

import asyncio
import json

import pytest

from router.errors import BadRequest
from router.forwarding import merge_chat_template_kwargs
from tests.support.harness import RouterHarness, chat


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


async def test_s2_a_trickling_body_gets_408(harness: RouterHarness) -> None:
    harness.model("chat-a")
    settings = harness.settings()
    settings = settings.model_copy(
        update={"server": settings.server.model_copy(update={"header_timeout": 1.0})}
    )
    await harness.start(settings)
    assert harness.server is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", harness.server.port)
    body = b'{"model": "chat-a", "messages": []}'
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    try:
        started = asyncio.get_running_loop().time()
        answer = b""
        for byte in body[:5]:  # one byte a second: never finishes within the deadline
            writer.write(bytes([byte]))
            await writer.drain()
            try:
                answer = await asyncio.wait_for(reader.read(4096), 1.0)
            except TimeoutError:
                continue
            break
        elapsed = asyncio.get_running_loop().time() - started
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert elapsed < 3.5
    assert harness.runtimes.spawn_count == 0  # nothing was loaded for it


async def test_disabling_a_loaded_model_unloads_it_in_the_webui_shape(
    harness: RouterHarness,
) -> None:
    harness.model("chat-a")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    r = await client.post(
        "/router/v1/site/models/state",
        json={"node_id": "local", "local_id": "chat-a", "enabled": False},
    )
    assert r.status_code == 200 and r.json()["enabled"] is False
    assert harness.runtimes.status_of("chat-a") == "unloaded"
    assert (await client.post("/v1/chat/completions", json=chat("chat-a"))).status_code == 404
    r = await client.post(
        "/router/v1/site/models/state",
        json={"node_id": "elsewhere", "local_id": "chat-a", "enabled": True},
    )
    assert r.status_code == 404  # a node is chosen by id, and only this one is known here
    r = await client.post(
        "/router/v1/site/models/state", json={"local_id": "chat-a", "enabled": True}
    )
    assert r.status_code == 200
    assert (await client.post("/v1/chat/completions", json=chat("chat-a"))).status_code == 200
