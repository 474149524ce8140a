"""The fake backend: each family's surface (launched with real argv) and the fault switches."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import time
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from backends.process import SupervisedProcess
from tests.fakes import fake_backend as fb
from tests.fakes.wrappers import fake_argv, write_fake_binary
from tests.support.harness import free_port, wait_http

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("clean_tree")]
HOST = "127.0.0.1"


@asynccontextmanager
async def backend(
    argv: list[str],
    probe: str,
    env: dict[str, str] | None = None,
    ready: bool = True,
    up: asyncio.Event | None = None,
) -> AsyncIterator[tuple[SupervisedProcess, str]]:
    def on_output(_stream: str, line: bytes) -> None:
        if up is not None and line.startswith(b"fake backend "):
            up.set()  # the program is running; what follows is up to its switches

    env = {**os.environ, **(env or {})}
    p = SupervisedProcess(argv, env=env, name="fake", on_output=on_output)
    await p.start()
    try:
        base = f"http://{HOST}:{_port_of(argv)}"
        if ready:
            await wait_http(base + probe)
        yield p, base
    finally:
        await p.stop(2.0)


def _port_of(argv: list[str]) -> int:
    for flag in ("--port", "--listen-port"):
        if flag in argv:
            return int(argv[argv.index(flag) + 1])
    raise AssertionError("no port in argv")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert zlib.crc32(data[12:29]) & 0xFFFFFFFF == struct.unpack(">I", data[29:33])[0]
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def sse_events(resp: aiohttp.ClientResponse) -> list[str]:
    body = (await resp.read()).decode()
    return [line[6:] for line in body.split("\n") if line.startswith("data: ")]


# ---- argv parsing --------------------------------------------------------------------------


def test_parse_real_argv_styles(tmp_path: Path) -> None:
    o = fb.parse_args("--family llamacpp -m m.gguf -mm p.gguf -ngl 99 -c 512 --port 9".split())
    assert (o.model, o.ctx, o.port) == ("m.gguf", 512, 9)
    o = fb.parse_args(
        "--family vllm serve /m/tiny --host h --served-model-name a b --dtype f".split()
    )
    assert (o.model, o.served, o.host) == ("/m/tiny", ["a", "b"], "h")
    kcpps = tmp_path / "x.kcpps"
    kcpps.write_text(json.dumps({"model": ["/m/k.gguf"], "sdmodel": "/m/s.safetensors"}))
    o = fb.parse_args(["--family", "koboldcpp", str(kcpps), "--port", "5"])
    assert (o.family, o.config, o.model, o.sdmodel) == (
        "kobold",
        str(kcpps),
        "/m/k.gguf",
        "/m/s.safetensors",
    )
    o = fb.parse_args(
        "--family whispercpp -m w.bin --tokens=3 --ttft 0.5 --exit-at-start 0".split()
    )
    assert (o.family, o.tokens, o.ttft, o.exit_at_start) == ("whisper", 3, 0.5, 0)


def test_tiny_png_is_valid() -> None:
    assert png_size(fb.tiny_png(3, 2)) == (3, 2)


# ---- surfaces ------------------------------------------------------------------------------


async def test_llamacpp_surface(tmp_path: Path) -> None:
    port = free_port()
    binary = write_fake_binary(tmp_path, "llamacpp")
    argv = [
        str(binary),
        "-m",
        "/models/x.gguf",
        "--host",
        HOST,
        "--port",
        str(port),
        "--alias",
        "a1",
        "-c",
        "2048",
        "-ngl",
        "99",
        "--embedding",
        "--metrics",
    ]
    env = {"FAKE_BACKEND": "--startup-delay 0.6 --print-ready-line"}
    async with (
        backend(argv, "/health", env, ready=False) as (p, base),
        aiohttp.ClientSession() as s,
    ):
        while True:  # the port opens before the model is loaded, answering 503
            try:
                async with s.get(base + "/v1/models") as r:
                    assert r.status == 503 and (await r.json()) == fb.LOADING
                    break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.02)
        await wait_http(base + "/health")
        assert any("server is listening on http://127.0.0.1:" in x for x in p.tail(20))
        async with s.get(base + "/v1/models") as r:
            assert r.headers["X-Fake-Model"] == "/models/x.gguf"
            assert (await r.json())["data"][0]["id"] == "a1"
        async with s.get(base + "/props") as r:
            assert (await r.json())["model_path"] == "/models/x.gguf"
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        async with s.post(base + "/v1/chat/completions", json=chat) as r:
            body = await r.json()
            assert (
                body["model"] == "a1"
                and body["choices"][0]["message"]["content"] == "tok0 tok1 tok2 "
            )
        stream = {**chat, "stream": True, "stream_options": {"include_usage": True}}
        async with s.post(base + "/v1/chat/completions", json=stream) as r:
            assert r.headers["Content-Type"].startswith("text/event-stream")
            events = await sse_events(r)
        assert events[-1] == "[DONE]" and json.loads(events[-2])["usage"]["completion_tokens"] == 3
        async with s.post(base + "/v1/completions", json={"prompt": "x", "max_tokens": 2}) as r:
            assert (await r.json())["choices"][0]["text"] == "tok0 tok1 "
        async with s.post(
            base + "/completion", json={"prompt": "x", "n_predict": 2, "stream": True}
        ) as r:
            events = await sse_events(r)
            assert json.loads(events[-1])["stop"] is True and len(events) == 3
        async with s.post(base + "/v1/embeddings", json={"input": ["a", "b"]}) as r:
            assert len((await r.json())["data"]) == 2
        async with s.post(base + "/tokenize", json={"content": "hé"}) as r:
            tokens = (await r.json())["tokens"]
        async with s.post(base + "/detokenize", json={"tokens": tokens}) as r:
            assert (await r.json())["content"] == "hé"
        async with s.get(base + "/slots") as r:
            assert (await r.json())[0]["n_ctx"] == 2048
        async with s.get(base + "/metrics") as r:
            assert "llamacpp:tokens_predicted_total" in await r.text()


async def test_llamacpp_defaults_without_alias_or_embedding() -> None:
    port = free_port()
    argv = fake_argv("llamacpp", "-m", "/m/y.gguf", "--host", HOST, "--port", str(port))
    async with backend(argv, "/health") as (_, base), aiohttp.ClientSession() as s:
        async with s.get(base + "/v1/models") as r:
            assert (await r.json())["data"][0][
                "id"
            ] == "/m/y.gguf"  # the -m path, like llama-server
        async with s.post(base + "/v1/embeddings", json={"input": "a"}) as r:
            assert r.status == 501 and (await r.json())["error"]["type"] == "not_supported_error"
        async with s.get(base + "/metrics") as r:
            assert r.status == 501


async def test_kobold_surface(tmp_path: Path) -> None:
    kcpps = tmp_path / "k.kcpps"
    kcpps.write_text(
        json.dumps(
            {
                "model_param": "/m/kob.gguf",
                "sdmodel": "/m/sd.safetensors",
                "whispermodel": "/m/w.bin",
            }
        )
    )
    port = free_port()
    argv = fake_argv(
        "kobold",
        "--config",
        str(kcpps),
        "--host",
        HOST,
        "--port",
        str(port),
        "--skiplauncher",
        "--quiet",
        "--startup-delay",
        "0.4",
        "--print-ready-line",
    )
    async with (
        backend(argv, "/api/extra/version", ready=False) as (p, base),
        aiohttp.ClientSession() as s,
    ):
        with pytest.raises(aiohttp.ClientConnectionError):  # refuses until loaded
            async with s.get(base + "/api/extra/version"):
                pass
        await wait_http(base + "/api/extra/version")
        assert any("Please connect to custom endpoint at" in x for x in p.tail(20))
        async with s.get(base + "/api/extra/version") as r:
            caps = await r.json()
            assert caps["llm"] and caps["txt2img"] and caps["transcribe"] and not caps["embeddings"]
            assert r.headers["X-Fake-Model"] == "/m/kob.gguf"
        async with s.get(base + "/api/v1/model") as r:
            assert (await r.json()) == {"result": "koboldcpp/kob"}
        async with s.post(base + "/api/v1/generate", json={"prompt": "x", "max_length": 2}) as r:
            assert (await r.json())["results"][0]["text"] == "tok0 tok1 "
        async with s.post(base + "/api/extra/generate/stream", json={"max_length": 2}) as r:
            events = [json.loads(e) for e in await sse_events(r)]
            assert [e["finish_reason"] for e in events] == [None, None, "length"]
        async with s.post(base + "/v1/chat/completions", json={"messages": []}) as r:
            assert (await r.json())["model"] == "koboldcpp/kob"
        async with s.post(base + "/sdapi/v1/txt2img", json={"prompt": "cat"}) as r:
            png_size(base64.b64decode((await r.json())["images"][0]))
        form = aiohttp.FormData()
        form.add_field("file", b"RIFFxxxx", filename="a.wav")
        async with s.post(base + "/v1/audio/transcriptions", data=form) as r:
            assert "fake transcript" in (await r.json())["text"]
        form = aiohttp.FormData()
        form.add_field("image", b"\xff\xd8", filename="a.jpg")
        async with s.post(base + "/upload/image", data=form) as r:
            assert (await r.json())["name"] == "kcpp_img2img.jpg"
        async with s.post(base + "/prompt", json={"prompt": {}}) as r:
            prompt_id = (await r.json())["prompt_id"]
        async with s.get(f"{base}/history/{prompt_id}") as r:
            assert prompt_id in await r.json()
        async with s.get(base + "/view?filename=kliteimg_00001_.png") as r:
            png_size(await r.read())


async def test_sdcpp_surface() -> None:
    port = free_port()
    argv = fake_argv(
        "sdcpp",
        "--diffusion-model",
        "/m/juggernautXL.safetensors",
        "--vae",
        "v",
        "--listen-ip",
        HOST,
        "--listen-port",
        str(port),
    )
    async with backend(argv, "/sdcpp/v1/capabilities") as (_, base), aiohttp.ClientSession() as s:
        async with s.get(base + "/v1/models") as r:
            assert (await r.json())["data"][0]["id"] == "sd-cpp-local"
            assert r.headers["X-Fake-Model"] == "/m/juggernautXL.safetensors"
        async with s.get(base + "/sdcpp/v1/capabilities") as r:
            assert (await r.json())["model"]["stem"] == "juggernautXL"
        async with s.post(base + "/sdapi/v1/txt2img", json={"prompt": "x", "batch_size": 2}) as r:
            assert len((await r.json())["images"]) == 2
        async with s.post(base + "/v1/images/generations", json={"prompt": "x"}) as r:
            png_size(base64.b64decode((await r.json())["data"][0]["b64_json"]))
        async with s.post(base + "/sdcpp/v1/vid_gen", json={"prompt": "x", "video_frames": 9}) as r:
            assert r.status == 202
            poll = (await r.json())["poll_url"]
        for _ in range(200):
            async with s.get(base + poll) as r:
                job = await r.json()
            if job["status"] == "completed":
                break
            await asyncio.sleep(0.01)
        assert job["result"]["frame_count"] == 9
        assert base64.b64decode(job["result"]["b64_json"])[:4] == b"\x1a\x45\xdf\xa3"
        async with s.get(base + "/sdcpp/v1/jobs/job_nope") as r:
            assert r.status == 404


async def test_whisper_surface() -> None:
    port = free_port()
    argv = fake_argv(
        "whisper", "-m", "/m/ggml-tiny.bin", "--host", HOST, "--port", str(port), "-nf"
    )
    async with backend(argv, "/health") as (_, base), aiohttp.ClientSession() as s:
        results: dict[str, Any] = {}
        for fmt in ("json", "verbose_json", "text", "srt", "vtt"):
            form = aiohttp.FormData()
            form.add_field("file", b"RIFF" + bytes(40), filename="a.wav")
            form.add_field("response_format", fmt)
            async with s.post(base + "/inference", data=form) as r:
                assert r.status == 200 and r.headers["X-Fake-Model"] == "/m/ggml-tiny.bin"
                results[fmt] = (r.content_type, await r.text())
        assert json.loads(results["json"][1]) == {"text": " fake transcript of 44 bytes"}
        assert json.loads(results["verbose_json"][1])["segments"][0]["end"] == 1.0
        assert results["text"][0] == "text/html" and results["srt"][0] == "application/x-subrip"
        assert results["vtt"][1].startswith("WEBVTT")
        form = aiohttp.FormData()
        form.add_field("response_format", "json")
        async with s.post(base + "/v1/audio/transcriptions", data=form) as r:
            assert r.status == 400


async def test_vllm_surface() -> None:
    port = free_port()
    argv = fake_argv(
        "vllm",
        "serve",
        "/m/tiny",
        "--host",
        HOST,
        "--port",
        str(port),
        "--served-model-name",
        "tiny-chat",
        "--max-model-len",
        "512",
    )
    async with backend(argv, "/health") as (_, base), aiohttp.ClientSession() as s:
        async with s.get(base + "/health") as r:
            assert await r.read() == b""
        async with s.get(base + "/v1/models") as r:
            card = (await r.json())["data"][0]
            assert (card["id"], card["root"], card["max_model_len"]) == (
                "tiny-chat",
                "/m/tiny",
                512,
            )
        chat = {"model": "tiny-chat", "messages": [], "max_tokens": 1}
        async with s.post(base + "/v1/chat/completions", json=chat) as r:
            assert (await r.json())["model"] == "tiny-chat"
        async with s.post(base + "/v1/completions", json={**chat, "model": "other"}) as r:
            assert r.status == 404 and (await r.json())["error"]["param"] == "model"
        async with s.post(base + "/v1/embeddings", json={"input": "x"}) as r:
            assert (await r.json())["model"] == "tiny-chat"
        async with s.post(base + "/tokenize", json={"prompt": "ab"}) as r:
            assert (await r.json())["count"] == 2
        async with s.get(base + "/version") as r:
            assert "version" in await r.json()


# ---- fault switches ------------------------------------------------------------------------


def llama(port: int, *switches: str) -> list[str]:
    return fake_argv("llamacpp", "-m", "/m/f.gguf", "--host", HOST, "--port", str(port), *switches)


async def test_streaming_rate_ttft_and_crash_after_tokens() -> None:
    port = free_port()
    argv = llama(port, "--ttft", "0.3", "--token-rate", "20", "--crash-after-tokens", "4")
    async with backend(argv, "/health") as (p, base), aiohttp.ClientSession() as s:
        t0 = time.monotonic()
        arrivals: list[float] = []
        body = {"messages": [], "max_tokens": 10, "stream": True}
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(base + "/v1/chat/completions", json=body) as r:
                async for line in r.content:
                    if b"tok" in line:
                        arrivals.append(time.monotonic() - t0)
        assert len(arrivals) == 4
        assert arrivals[0] >= 0.3 and arrivals[3] - arrivals[0] >= 3 / 20 * 0.9
        assert await asyncio.wait_for(p.wait_exit(), 5) == 134


async def test_hang_after_tokens_keeps_health_and_records_disconnect(tmp_path: Path) -> None:
    port, record = free_port(), tmp_path / "requests.jsonl"
    argv = llama(port, "--hang-after-tokens", "2", "--record-requests", str(record))
    async with backend(argv, "/health") as (_, base), aiohttp.ClientSession() as s:
        body = {"messages": [], "max_tokens": 10, "stream": True}
        got: list[bytes] = []

        async def consume() -> None:
            async with s.post(base + "/v1/chat/completions", json=body) as r:
                async for line in r.content:
                    if b"tok" in line:
                        got.append(line)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)
        assert len(got) == 2 and not task.done()
        async with s.get(base + "/health") as r:
            assert r.status == 200
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for _ in range(100):
            lines = [json.loads(x) for x in record.read_text().splitlines()]
            if any(x["disconnected"] for x in lines):
                break
            await asyncio.sleep(0.02)
        chat = [x for x in lines if x["path"] == "/v1/chat/completions"]
        assert [x["disconnected"] for x in chat] == [False, True]


async def test_cancel_crashes_on_client_abort() -> None:
    port = free_port()
    argv = llama(port, "--token-rate", "10", "--cancel-crashes")
    async with backend(argv, "/health") as (p, base), aiohttp.ClientSession() as s:
        body = {"messages": [], "max_tokens": 50, "stream": True}
        async with s.post(base + "/v1/chat/completions", json=body) as r:
            await r.content.readline()
        assert await asyncio.wait_for(p.wait_exit(), 5) == 134


async def test_reset_after_body_counts_one_attempt(tmp_path: Path) -> None:
    port, record = free_port(), tmp_path / "req.jsonl"
    argv = llama(port, "--reset-after-body", "--record-requests", str(record))
    async with backend(argv, "/health") as (_, base), aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError):
            async with s.post(base + "/v1/completions", json={"prompt": "x"}) as r:
                await r.read()
        posts = [json.loads(x) for x in record.read_text().splitlines()]
        assert [x["path"] for x in posts if x["method"] == "POST"] == ["/v1/completions"]


async def test_refuse_for_then_accept_and_slow_health() -> None:
    port = free_port()
    argv = fake_argv(
        "whisper", "-m", "w.bin", "--port", str(port), "--refuse-for", "0.5", "--slow-health", "0.3"
    )
    up = asyncio.Event()
    async with (
        backend(argv, "/health", ready=False, up=up) as (_, base),
        aiohttp.ClientSession() as s,
    ):
        await asyncio.wait_for(up.wait(), 10)
        started = time.monotonic()  # the program is up; only the switch keeps it refusing
        with pytest.raises(aiohttp.ClientConnectionError):
            async with s.get(base + "/health"):
                pass
        await wait_http(base + "/health")
        assert time.monotonic() - started >= 0.4
        t0 = time.monotonic()
        async with s.get(base + "/health") as r:
            assert r.status == 200
        assert time.monotonic() - t0 >= 0.28


async def test_health_503_for_and_progress_lines() -> None:
    port = free_port()
    env = {
        "FAKE_BACKEND": "--family vllm --health-503-for 1.0 --startup-delay 0.4 --progress-every 0.1"
    }
    argv = fake_argv("vllm", "serve", "m", "--port", str(port))[:2] + [
        "serve",
        "m",
        "--port",
        str(port),
    ]
    async with (
        backend(argv, "/health", env, ready=False) as (p, base),
        aiohttp.ClientSession() as s,
    ):
        await wait_http(base + "/v1/models")
        async with s.get(base + "/health") as r:
            assert r.status == 503
        await wait_http(base + "/health")
        assert sum("loading model tensors" in x for x in p.tail(50)) >= 3


@pytest.mark.parametrize("family", sorted(fb.FAMILIES))
async def test_exit_at_start_prints_the_family_error(family: str) -> None:
    p = SupervisedProcess(fake_argv(family, "--port", "0", "--exit-at-start", "0"), name="x")
    await p.start()
    assert await asyncio.wait_for(p.wait_exit(), 10) == 0  # early exit 0, like whisper --convert
    await p.stop(1.0)
    assert fb.FATAL_LINES[family].splitlines()[-1] in p.tail(5)


async def test_unknown_family_is_refused() -> None:
    p = SupervisedProcess(fake_argv("nope"), name="bad")
    await p.start()
    assert await asyncio.wait_for(p.wait_exit(), 10) == 2
    await p.stop(1.0)
