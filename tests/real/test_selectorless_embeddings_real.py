"""Selectorless embeddings on the real llama-server (issue 23): an unnamed Ollama `/api/embed`
is served by the loaded embedding runtime like `/v1/embeddings`; a llama-server *text* runtime
is never the default embedding backend (started without `--embeddings` it answers 501), so
with only that loaded the router answers its own 400 naming the embedding model, and loads
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def test_an_unnamed_ollama_embed_uses_the_loaded_embedding_runtime(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    write_demo_text_kcpps(real_harness, demo_text)
    client = await real_harness.start()
    named = await client.post("/v1/embeddings", json={"model": "embed", "input": ["a", "b"]})
    assert named.status_code == 200, named.text
    vectors = [d["embedding"] for d in named.json()["data"]]
    unnamed = await client.post("/v1/embeddings", json={"input": ["a", "b"]})
    assert unnamed.status_code == 200, unnamed.text
    assert unnamed.json()["model"] == "embed"
    assert [d["embedding"] for d in unnamed.json()["data"]] == vectors
    ollama = await client.post("/api/embed", json={"input": ["a", "b"]})
    assert ollama.status_code == 200, ollama.text
    answer = ollama.json()
    assert answer["model"] == "embed" and len(answer["embeddings"]) == 2
    assert [len(v) for v in answer["embeddings"]] == [len(v) for v in vectors]
    assert real_harness.runtimes.spawn_count == 1


async def test_a_llama_server_text_runtime_is_not_a_default_embedding_backend(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    write_demo_text_kcpps(real_harness, demo_text)
    client = await real_harness.start()
    chat = await client.post("/v1/chat/completions", json={**CHAT, "model": "chat-a"})
    assert chat.status_code == 200, chat.text
    [text_server] = real_harness.runtimes.views()
    # What the runtime itself answers, asked directly: it cannot serve embeddings.
    direct = await client.post(text_server.base_url + "/v1/embeddings", json={"input": "a"})
    assert direct.status_code == 501 and "--embeddings" in direct.text
    reply = await client.post("/v1/embeddings", json={"input": "a"})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"].endswith("embedding models: embed")
    ollama = await client.post("/api/embed", json={"input": "a"})
    assert ollama.status_code == 400 and ollama.json()["error"].endswith("models: embed")
    assert real_harness.runtimes.spawn_count == 1
