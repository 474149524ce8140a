"""Guardian models with the real llama-server: an image chat sent to a text-only model is
answered by the demo chat model loaded with the generated vision projector (`mmproj`).

The text-only model is never loaded: the router refuses (no guardian) or re-routes (guardian)
before choosing a backend, so the whole test costs one llama-server load.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.demo_models.demo_set import write_vision_demo
from router.demo_models.gguf_mmproj import write_mmproj_gguf
from tests.real.router_fixtures import write_config
from tests.support.harness import RouterHarness, free_port, read_sse

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]

URL = "/router/v1/site/guardian-models"
GUARDIAN = "chat-vision"  # the demo set's vision config: chat-a with the projector
GEN = {"max_tokens": 8, "temperature": 0, "seed": 42}
# 32x32 pixels in 8x8 patches: the generated projector turns the image into 16 prompt tokens.
IMAGE_TOKENS = 16


def png(width: int, height: int) -> bytes:
    """An RGB gradient PNG, written by hand (Pillow is not a dependency)."""
    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 8 % 256, y * 8 % 256, 128)) for x in range(width))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


IMAGE_URL = "data:image/png;base64," + base64.b64encode(png(32, 32)).decode()
QUESTION = {"type": "text", "text": "what is in this picture"}


def image_chat(model: str, **extra: Any) -> dict[str, Any]:
    parts = [QUESTION, {"type": "image_url", "image_url": {"url": IMAGE_URL}}]
    return {"model": model, "messages": [{"role": "user", "content": parts}], **GEN, **extra}


def text_chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": [QUESTION]}], **GEN}


async def started(h: RouterHarness, demo: dict[str, Path], tmp: Path) -> httpx.AsyncClient:
    """`plain`: the demo chat model alone; `chat-vision`: the same file with the projector."""
    write_config(h, "plain", model_param=demo["chat-a"])
    write_vision_demo(tmp, h.kcpps_dir, demo["chat-a"])
    client = await h.start(h.settings(load_timeout=60))
    client.timeout = httpx.Timeout(60)
    return client


async def assign(client: httpx.AsyncClient, scope: str) -> None:
    body: dict[str, Any] = {"scope": scope, "guardian": {"model_id": GUARDIAN}}
    if scope == "model":
        body["model_id"] = "plain"
    r = await client.post(URL, json=body)
    assert r.status_code == 200, r.text


async def unassign(client: httpx.AsyncClient, scope: str) -> None:
    params = {"scope": scope, **({"model_id": "plain"} if scope == "model" else {})}
    r = await client.delete(URL, params=params)
    assert r.status_code == 200, r.text


async def assert_refused(h: RouterHarness, client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json=image_chat("plain"))
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "'plain'" in message and "guardian-models" in message
    assert h.runtimes.status_of("plain") == "unloaded"


async def test_an_image_chat_to_a_text_model_is_answered_by_a_real_guardian(
    real_harness: RouterHarness, demo_text: dict[str, Path], tmp_path: Path
) -> None:
    h = real_harness
    client = await started(h, demo_text, tmp_path)
    await assert_refused(h, client)
    assert h.backend_pids() == []  # refused before any backend was chosen

    # The guardian's own prompt without the image: the baseline for the token count below.
    alone = await client.post("/v1/chat/completions", json=text_chat(GUARDIAN))
    assert alone.status_code == 200, alone.text
    text_tokens = alone.json()["usage"]["prompt_tokens"]

    for scope in ("model", "node", "cluster"):
        await assign(client, scope)
        r = await client.post("/v1/chat/completions", json=image_chat("plain"))
        assert r.status_code == 200, f"{scope}: {r.text}"
        reply = r.json()
        assert reply["model"] == "plain"
        assert isinstance(reply["choices"][0]["message"]["content"], str)
        # The image went through the real projector: its patches are prompt tokens.
        assert reply["usage"]["prompt_tokens"] == text_tokens + IMAGE_TOKENS, scope
        if scope != "cluster":
            await unassign(client, scope)

    async with client.stream(
        "POST", "/v1/chat/completions", json=image_chat("plain", stream=True)
    ) as r:
        assert r.status_code == 200
        events = await read_sse(r)
    assert events[-1].data == "[DONE]"
    chunks = [json.loads(e.data) for e in events[:-1]]
    assert chunks and all(c["model"] == "plain" for c in chunks)
    assert any(c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks)

    await unassign(client, "cluster")
    await assert_refused(h, client)
    assert h.runtimes.status_of(GUARDIAN) == "ready" and len(h.backend_pids()) == 1

    assert (await client.post("/router/v1/site/analytics/flush")).status_code in (200, 204)
    rows = _events(h)
    assert sorted(r for r in rows if r[1] == GUARDIAN) == [("plain", GUARDIAN, 200)] * 4
    assert (GUARDIAN, None, 200) in rows
    assert [r for r in rows if r[0] == "plain" and r[1] is None] == [("plain", None, 400)] * 2


def _events(h: RouterHarness) -> list[tuple[str | None, str | None, int]]:
    with sqlite3.connect(h.tmp / "data" / "router.sqlite") as db:
        return list(db.execute("SELECT model, answered_by, status FROM analytics_events"))


def test_a_projector_narrower_than_the_text_model_is_refused_at_load(
    llama_server_bin: Path, demo_text: dict[str, Path], tmp_path: Path
) -> None:
    """The projector's output width must be the text model's embedding width (64)."""
    projector = write_mmproj_gguf(tmp_path / "narrow.gguf", seed=6, n_text_embd=32)
    cmd = [str(llama_server_bin), "-m", str(demo_text["chat-a"]), "--mmproj", str(projector)]
    cmd += ["--host", "127.0.0.1", "--port", str(free_port()), "-t", "1"]
    done = subprocess.run(cmd, capture_output=True, timeout=30, check=False)
    assert done.returncode != 0
    assert b"mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)" in (
        done.stdout + done.stderr
    )
