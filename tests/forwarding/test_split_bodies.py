"""Bodies the router parses itself, sent the way a network delivers them: in pieces.

aiohttp's `content.read(n)` answers with whatever is buffered, so a reader that called it once
saw only the first piece of a body that arrived in several (a 200 KB `/api/chat` was "invalid
JSON" at random; `   {"target":"image"}` cut after the spaces unloaded every lane). Each test
here sends its body in several writes with pauses between them, both chunked and with an
honest Content-Length, and checks the effect only the whole body can have. The large bodies
(hundreds of KB) go in pieces too and once more as one ordinary client write.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.appkeys import CATALOG, COMFY
from router.domain import Lane
from tests.fakes.fake_backend import tiny_png
from tests.support.comfy import form, video_workflow, wait_done
from tests.support.harness import RouterHarness, wav_bytes

pytestmark = pytest.mark.timeout(180)

PAUSE = 0.15  # long enough that the server reads the first piece before the next one arrives
FRAMINGS = ("chunked", "length")
IMAGE_ID = "art-art"


async def _pieces(parts: list[bytes]) -> AsyncIterator[bytes]:
    for i, part in enumerate(parts):
        if i:
            await asyncio.sleep(PAUSE)
        yield part


def cut(body: bytes, n: int = 3) -> list[bytes]:
    """`body` in `n` pieces of about equal size."""
    size = max(1, -(-len(body) // n))
    return [body[i : i + size] for i in range(0, len(body), size)]


async def post_split(
    client: httpx.AsyncClient,
    path: str,
    parts: list[bytes],
    framing: str,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST `parts` as separate writes; `length` frames them with an honest Content-Length."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    if framing == "length":
        sent["Content-Length"] = str(sum(map(len, parts)))
    return await client.post(path, content=_pieces(parts), headers=sent)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def long_history(total: int) -> list[dict[str, str]]:
    """An Ollama chat history of about `total` bytes of JSON."""
    turn = "lorem ipsum dolor sit amet " * 40
    messages = []
    while len(dumps(messages)) < total:
        role = "user" if len(messages) % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"{len(messages)}: {turn}"})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "and now?"})
    return messages


@pytest.fixture
async def site(harness: RouterHarness, tmp_path: Path) -> RouterHarness:
    """One router with a text, an embedding, an image (sd-server) and a voice (whisper) model."""
    harness.faults["sdcpp"] = f"--record-requests {tmp_path / 'sd.jsonl'}"
    harness.model("chat-a")
    harness.model("embed", embeddingsmodel="embed.gguf")
    harness.model("art", sdmodel="art.safetensors")
    harness.model("ears", whispermodel="ggml-base.bin")
    await harness.start()
    return harness


def client_of(h: RouterHarness) -> httpx.AsyncClient:
    assert h.client is not None
    return h.client


# ---- control ----------------------------------------------------------------------------------


async def test_load_takes_a_body_sent_in_pieces(site: RouterHarness) -> None:
    client = client_of(site)
    for framing in FRAMINGS:
        r = await post_split(client, "/router/v1/load", cut(b'{"model": "chat-a"}'), framing)
        assert r.status_code == 200, (framing, r.text)
        assert r.json()["model"] == "chat-a" and site.runtimes.status_of("chat-a") == "ready"


async def test_unload_cut_after_leading_spaces_unloads_only_the_image_lane(
    site: RouterHarness,
) -> None:
    client = client_of(site)
    for framing in FRAMINGS:
        for model in ("chat-a", IMAGE_ID):
            assert (await client.post("/router/v1/load", json={"model": model})).status_code == 200
        parts = [b"   ", b'{"target":', b' "image"}']
        r = await post_split(client, "/router/v1/unload", parts, framing)
        assert r.status_code == 200, (framing, r.text)
        assert r.json() == {"target": "image", "unloaded": [f"art@{Lane.IMAGE}"]}, framing
        assert site.runtimes.status_of("chat-a") == "ready", framing
        assert site.runtimes.status_of("art") == "unloaded", framing


async def test_models_state_takes_a_body_sent_in_pieces(site: RouterHarness) -> None:
    client, catalog = client_of(site), site.app[CATALOG]  # type: ignore[index]
    for framing in FRAMINGS:
        for enabled in (False, True):
            body = dumps({"local_id": "chat-a", "enabled": enabled})
            r = await post_split(client, "/router/v1/site/models/state", cut(body, 4), framing)
            assert r.status_code == 200, (framing, r.text)
            assert catalog.is_disabled("chat-a") is not enabled, framing


async def test_sdapi_options_takes_a_body_sent_in_pieces(site: RouterHarness) -> None:
    client = client_of(site)
    for framing in FRAMINGS:
        body = dumps({"samples_format": "png", "sd_model_checkpoint": IMAGE_ID})
        r = await post_split(client, "/sdapi/v1/options", cut(body), framing)
        assert r.status_code == 200, (framing, r.text)
        assert site.runtimes.status_of("art") == "ready", framing
        await client.post("/router/v1/unload", json={"target": "image"})


# ---- Ollama -----------------------------------------------------------------------------------


async def test_ollama_routes_take_bodies_sent_in_pieces(site: RouterHarness) -> None:
    client = client_of(site)
    bodies: dict[str, dict[str, Any]] = {
        "/api/show": {"model": "chat-a"},
        "/api/chat": {
            "model": "chat-a",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": False,
        },
        "/api/generate": {"model": "chat-a", "prompt": "hello", "stream": False},
        "/api/embed": {"model": "embed", "input": ["a", "b"]},
        "/api/embeddings": {"model": "embed", "prompt": "a"},
    }
    for framing in FRAMINGS:
        for path, body in bodies.items():
            r = await post_split(client, path, cut(dumps(body), 4), framing)
            assert r.status_code == 200, (framing, path, r.text)
            answer = r.json()
            if path == "/api/show":
                assert answer["model_info"] == {"general.basename": "chat-a"}
            elif path == "/api/embed":
                assert len(answer["embeddings"]) == 2
            elif path == "/api/embeddings":
                assert answer["embedding"]
            else:
                assert answer["model"] == "chat-a" and answer["done"] is True


async def test_ollama_chat_with_a_long_history(site: RouterHarness) -> None:
    """Hundreds of KB: in 64 KB pieces with pauses, and as one write from an ordinary client."""
    client = client_of(site)
    messages = long_history(400 * 1024)
    body = dumps({"model": "chat-a", "messages": messages, "stream": False})
    pieces = [body[i : i + 64 * 1024] for i in range(0, len(body), 64 * 1024)]
    replies = [await post_split(client, "/api/chat", pieces, framing) for framing in FRAMINGS]
    replies.append(await client.post("/api/chat", content=body))
    for r in replies:
        assert r.status_code == 200, r.text
        # The fake backend counts a token per 4 bytes of the messages it was sent: only the
        # whole history gets near that count.
        assert r.json()["prompt_eval_count"] >= len(dumps(messages)) // 4 * 0.9


# ---- voice ------------------------------------------------------------------------------------


async def test_kobold_json_transcription_takes_a_body_sent_in_pieces(site: RouterHarness) -> None:
    client = client_of(site)
    audio = wav_bytes(5.0)  # 160 KB of audio, about 213 KB of base64
    body = dumps({"model": "ears", "audio_data": base64.b64encode(audio).decode()})
    for framing in FRAMINGS:
        r = await post_split(client, "/api/extra/transcribe", cut(body, 5), framing)
        assert r.status_code == 200, (framing, r.text)
        assert r.json() == {"text": f" fake transcript of {len(audio)} bytes"}, framing


# ---- ComfyUI ----------------------------------------------------------------------------------


async def test_comfy_routes_take_bodies_sent_in_pieces(site: RouterHarness) -> None:
    client, uploads = client_of(site), site.app[COMFY].uploads  # type: ignore[index]
    assert (await client.post("/router/v1/load", json={"model": IMAGE_ID})).status_code == 200
    png = tiny_png(16, 16)
    large = png + bytes(300 * 1024)  # trailing bytes after IEND: still the client's file
    for framing in FRAMINGS:
        upload = form(f"cat-{framing}.png", large)
        r = await post_split(
            client, "/upload/image", cut(upload["content"], 6), framing, upload["headers"]
        )
        assert r.status_code == 200, (framing, r.text)
        data, kind = uploads.load(f"cat-{framing}.png")
        assert hashlib.sha256(data).digest() == hashlib.sha256(large).digest(), framing
        assert kind == "image"

        workflow = video_workflow(image=f"cat-{framing}.png")
        r = await post_split(client, "/prompt", cut(dumps({"prompt": workflow}), 5), framing)
        assert r.status_code == 200, (framing, r.text)
        prompt_id = r.json()["prompt_id"]
        assert (await wait_done(client, prompt_id))["status"]["status_str"] == "success"

        r = await post_split(client, "/history", cut(dumps({"delete": [prompt_id]})), framing)
        assert r.status_code == 200, (framing, r.text)
        assert (await client.get(f"/history/{prompt_id}")).json() == {}, framing


# ---- vLLM control -----------------------------------------------------------------------------


@pytest.fixture
async def vllm_site(harness: RouterHarness, tmp_path: Path) -> tuple[RouterHarness, Path]:
    record = tmp_path / "vllm.jsonl"
    harness.faults["vllm"] = f"--record-requests {record}"
    harness.model("vl", "vllm", model_param="vl-text.safetensors", serve_args=["--enable-lora"])
    client = await harness.start()
    r = await client.post("/router/v1/load", json={"model": "vl"})
    assert r.status_code == 200, r.text
    return harness, record


async def test_vllm_control_routes_take_bodies_sent_in_pieces(
    vllm_site: tuple[RouterHarness, Path],
) -> None:
    h, record = vllm_site
    client = client_of(h)

    def reached() -> list[str]:
        return [r["path"] for r in h.records(record) if r.get("event") == "request"]

    for framing in FRAMINGS:
        # The router reads lora_path from the end of the body: refused by name, not as bad JSON.
        parts = [b'{"lora_name": "x",', b' "lora_path": ', b'"../../etc"}']
        r = await post_split(client, "/router/v1/vllm/load_lora_adapter", parts, framing)
        assert r.status_code == 400 and r.json()["error"]["param"] == "lora_path", r.text
        for op in ("load_lora_adapter", "unload_lora_adapter"):
            before = len(reached())
            body = dumps({"lora_name": "style", "lora_path": "style-lora"})
            r = await post_split(client, f"/router/v1/vllm/{op}", cut(body), framing)
            assert "x-fake-pid" in r.headers, (framing, op, r.text)  # the backend answered
            assert reached()[before:] == [f"/v1/{op}"], (framing, op)
