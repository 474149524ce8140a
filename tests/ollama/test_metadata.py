"""Ollama model metadata from the GGUF header (issue 23), read with the official `ollama`
client: /api/tags, /api/show and /api/ps fill details, model_info, capabilities,
context_length and expires_at; the header is read once per file, in a worker thread.
Also the smaller fidelity items: `name:latest`, /api/show without a JSON content type,
`GET /` and `HEAD /`, and the management routes in Ollama's shape."""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from pathlib import Path
from typing import Any

import gguf
import ollama
import pytest

from router.demo_models.gguf_llama import write_bert_gguf
from router.ollama import metadata as meta
from router.site.gguf_headers import GgufHeaders, read_gguf_header
from tests.support.harness import RouterHarness
from tests.support.ollama import client_for

TOOLS_TEMPLATE = (
    "{% if tools %}{% for tool in tools %}{{ tool | tojson }}{% endfor %}{% endif %}"
    "{% for message in messages %}{{ message['content'] }}{% endfor %}"
)
PARAMS = 8_030_261_248


def write_header_gguf(path: Path, *, arch: str = "qwen2", template: str = TOOLS_TEMPLATE) -> Path:
    """A GGUF with a model's header and no weights (the fake backend never reads it)."""
    writer = gguf.GGUFWriter(os.fspath(path), arch)
    writer.add_name("Test Qwen")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_uint64("general.parameter_count", PARAMS)
    writer.add_context_length(32768)
    writer.add_embedding_length(4096)
    writer.add_block_count(32)
    writer.add_head_count(32)
    writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
async def harness(harness: RouterHarness) -> RouterHarness:
    """The root harness with this module's models."""
    h = harness
    (h.models_dir / "qwen-mmproj.gguf").write_bytes(b"GGUF")
    h.model("qwen", contextsize=4096, mmproj=str(h.models_dir / "qwen-mmproj.gguf"))
    write_header_gguf(h.models_dir / "qwen.gguf")
    h.model("embed", embeddingsmodel="embed.gguf")
    write_bert_gguf(h.models_dir / "embed.gguf", seed=1)
    h.model("plain")  # "GGUF" and nothing else: no readable header
    return h


# ---- pure ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (8_030_261_248, "8.0B"),
        (7_000_000_000, "7B"),
        (135_000_000, "135M"),
        (494_032_768, "494.03M"),
        (1500, "2K"),
        (999, "999"),
    ],
)
def test_human_number_is_ollamas(n: int, text: str) -> None:
    assert meta.human_number(n) == text


def test_header_reader_and_shapes(tmp_path: Path) -> None:
    header = read_gguf_header(os.fspath(write_header_gguf(tmp_path / "m.gguf")))
    assert header is not None and header["tools"] is True
    info = header["model_info"]
    assert info["general.architecture"] == "qwen2" and info["general.parameter_count"] == PARAMS
    assert info["qwen2.context_length"] == 32768 and info["qwen2.block_count"] == 32
    assert meta.details(header, "gguf") == {
        "parent_model": "",
        "format": "gguf",
        "family": "qwen2",
        "families": ["qwen2"],
        "parameter_size": "8.0B",
        "quantization_level": "Q4_K_M",
    }
    assert meta.context_length(None, header) == 32768 and meta.context_length(512, header) == 512
    plain = tmp_path / "plain.gguf"
    plain.write_bytes(b"GGUF")
    assert read_gguf_header(os.fspath(plain)) is None
    assert meta.details(None, "gguf")["family"] == ""


async def test_header_cache_reads_each_file_once_in_a_thread(tmp_path: Path) -> None:
    path = write_header_gguf(tmp_path / "m.gguf")
    threads: list[threading.Thread] = []

    def read(p: str) -> dict[str, Any] | None:
        threads.append(threading.current_thread())
        return read_gguf_header(p)

    cache = GgufHeaders(read)
    got = await asyncio.gather(*(cache.get(path, None, 5) for _ in range(5)))
    assert all(g is not None and g["architecture"] == "qwen2" for g in got)
    assert await cache.get(path, None, 5) == got[0]
    assert cache.reads == 1 and threads[0] is not threading.main_thread()
    # The same bytes under another name, once hashed: keyed by the hash, read once more only.
    other = tmp_path / "copy.gguf"
    other.write_bytes(path.read_bytes())
    await cache.get(other, "ab" * 32, 5)
    await cache.get(path, "ab" * 32, 5)
    assert cache.reads == 2


# ---- through the router ------------------------------------------------------------------


async def test_tags_show_and_ps_carry_the_header(harness: RouterHarness) -> None:
    await harness.start()
    client = client_for(harness)
    tags = {m.model: m for m in (await client.list()).models}
    qwen = tags["qwen"].details
    assert qwen is not None
    assert (qwen.family, qwen.families, qwen.parameter_size, qwen.quantization_level) == (
        "qwen2",
        ["qwen2"],
        "8.0B",
        "Q4_K_M",
    )
    assert tags["embed"].details is not None and tags["embed"].details.family == "bert"
    assert tags["plain"].details is not None and tags["plain"].details.family == ""

    shown = await client.show("qwen")
    assert shown.capabilities == ["completion", "tools", "vision"]
    info = shown.modelinfo or {}
    assert info["general.architecture"] == "qwen2"
    assert info["general.parameter_count"] == PARAMS
    assert info["qwen2.context_length"] == 32768 and info["qwen2.embedding_length"] == 4096
    assert (await client.show("embed")).capabilities == ["embedding"]

    await client.generate(model="qwen")  # load
    (loaded,) = (await client.ps()).models
    assert loaded.model == "qwen" and loaded.context_length == 4096  # the configured context
    assert loaded.details is not None and loaded.details.quantization_level == "Q4_K_M"
    assert loaded.expires_at is not None and loaded.expires_at.year > 2200


async def test_latest_tag_is_the_model(harness: RouterHarness) -> None:
    await harness.start()
    client = client_for(harness)
    assert (await client.show("qwen:latest")).capabilities[0] == "completion"
    reply = await client.chat(model="qwen:latest", messages=[{"role": "user", "content": "hi"}])
    assert reply.model == "qwen:latest" and reply.message.content
    assert harness.runtimes.status_of("qwen") == "ready"


async def test_show_takes_json_without_a_json_content_type(harness: RouterHarness) -> None:
    client = await harness.start()
    body = json.dumps({"model": "qwen"}).encode()
    for headers in ({"Content-Type": "application/x-www-form-urlencoded"}, {}):
        r = await client.post("/api/show", content=body, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["details"]["family"] == "qwen2"


async def test_root_answers_like_ollama(harness: RouterHarness) -> None:
    client = await harness.start()
    for method in ("GET", "HEAD"):
        r = await client.request(method, "/")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        assert r.text == ("Ollama is running" if method == "GET" else "")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/push"),
        ("POST", "/api/copy"),
        ("POST", "/api/create"),
        ("DELETE", "/api/delete"),
    ],
)
async def test_management_routes_answer_in_ollama_shape(
    harness: RouterHarness, method: str, path: str
) -> None:
    client = await harness.start()
    r = await client.request(method, path, json={"model": "qwen", "source": "qwen"})
    assert r.status_code == 400
    assert set(r.json()) == {"error"} and path.rsplit("/", 1)[1] in r.json()["error"]


async def test_management_routes_through_the_sdk(harness: RouterHarness) -> None:
    await harness.start()
    client = client_for(harness)
    with pytest.raises(ollama.ResponseError) as caught:
        await client.delete("qwen")
    assert caught.value.status_code == 400 and "delete" in caught.value.error
    # A name the router does not serve says what can be pulled; one it serves is a success
    # (issue 36: Ollama answers success for a model it has; this was a 400).
    with pytest.raises(ollama.ResponseError) as caught:
        await client.pull("llama3.2")
    assert caught.value.status_code in (400, 503) and "hf.co/" in caught.value.error
    assert (await client.pull("qwen")).status == "success"


def test_expires_at_follows_the_runtime_deadline() -> None:
    now = 1_800_000_000.0
    assert meta.expires_at(300.0, now + 12, now) == meta.rfc3339(now + 12)  # idle: its deadline
    assert meta.expires_at(300.0, None, now) == meta.rfc3339(now + 300)  # working
    assert int(meta.expires_at(math.inf, None, now)[:4]) > 2300  # kept: now + 2^63 ns, as Ollama
