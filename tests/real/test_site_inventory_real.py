"""The site inventory over the demo GGUF models, with the real llama-server serving one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness, chat

pytestmark = [pytest.mark.real, pytest.mark.timeout(90)]


async def test_inventory_reads_demo_gguf_and_sees_the_real_runtime(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    write_demo_text_kcpps(h, demo_text)
    base = h.settings()
    roots = (demo_text["chat-a"].parent,)
    client = await h.start(
        base.model_copy(update={"models": base.models.model_copy(update={"file_roots": roots})})
    )

    r = await client.get("/router/v1/site/inventory", params={"include_files": "true"})
    assert r.status_code == 200, r.text
    files = {f["name"]: f for f in r.json()["files"]}
    chat_a = files["chat-a.gguf"]["metadata"]
    assert chat_a["architecture"] == "llama" and chat_a["context_length"] == 2048
    assert chat_a["name"] == "tensor-router demo chat A" and chat_a["parameter_count"] > 0
    embed = files["embed.gguf"]["metadata"]
    assert embed["architecture"] == "bert" and embed["context_length"] == 512
    assert files["chat-a.gguf"]["used_by"] == [{"id": "chat-a", "field": "model_param"}]

    r = await client.post("/v1/chat/completions", json=chat("chat-a", max_tokens=4))
    assert r.status_code == 200, r.text
    models = {m["id"]: m for m in (await client.get("/router/v1/site/inventory")).json()["models"]}
    (runtime,) = models["chat-a"]["runtimes"]
    assert runtime["state"] == "ready" and runtime["pid"] in h.backend_pids()
    assert models["chat-a"]["model_hash"] == files["chat-a.gguf"]["sha256"]

    # The portable copy, imported under another name, runs on the real backend too.
    exported = await client.post("/router/v1/site/model-assets/export", json={"id": "chat-b"})
    doc = exported.json()["kcpps"]
    r = await client.post(
        "/router/v1/site/model-assets/import", json={"id": "chat-c", "kcpps": doc}
    )
    assert r.status_code == 200, r.text
    r = await client.post("/v1/chat/completions", json=chat("chat-c", max_tokens=4))
    assert r.status_code == 200, r.text
