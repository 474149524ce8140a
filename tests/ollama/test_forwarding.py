"""Translated Ollama requests take the one forwarding path (Proxy.forward): a backend that dies
mid-answer ends the NDJSON stream with one error record inside a well-framed chunked body (d1),
and the analytics row carries the real traffic and upstream status (d2).

Real router on a real socket, fake llama-server / vLLM processes through the real supervisor,
a real HTTP client (httpx) and the official `ollama` client reading the body.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
from aiohttp import web

from tests.support.harness import RouterHarness, free_port

CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
GENERATE_BODY = {"model": "m", "prompt": "hi", "stream": True}


def _model(h: RouterHarness, family: str) -> None:
    if family == "vllm":
        h.model("m", "vllm", model_param="m-text.safetensors")
    else:
        h.model("m")


async def _ndjson(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    """Every record of a streamed answer; a broken chunked framing raises here."""
    async with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) async for line in r.aiter_lines() if line.strip()]


@pytest.mark.parametrize("family", ["llamacpp", "vllm"])
@pytest.mark.parametrize(
    ("path", "body"), [("/api/chat", CHAT_BODY), ("/api/generate", GENERATE_BODY)]
)
async def test_d1_backend_crash_mid_stream_ends_with_one_error_record(
    harness: RouterHarness, family: str, path: str, body: dict[str, Any]
) -> None:
    _model(harness, family)
    harness.faults[family] = "--crash-after-tokens 3"
    client = await harness.start()
    records = await _ndjson(client, path, body)
    text = [r for r in records if "error" not in r]
    assert len(text) == 3 and not any(r["done"] for r in text)
    assert "error" in records[-1] and records[-1]["error"]
    assert sum("error" in r for r in records) == 1
    assert set(records[-1]) == {"error"}


async def test_d1_ollama_client_sees_the_error_record_not_a_protocol_error(
    harness: RouterHarness,
) -> None:
    harness.model("m")
    harness.faults["llamacpp"] = "--crash-after-tokens 3"
    await harness.start()
    assert harness.server is not None
    client = ollama.AsyncClient(host=str(harness.server.make_url("")).rstrip("/"))
    parts = []
    with pytest.raises(ollama.ResponseError) as caught:
        async for part in await client.chat(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            parts.append(part)
    assert len(parts) == 3 and caught.value.error


async def test_d1_after_a_crash_the_next_request_is_answered(harness: RouterHarness) -> None:
    harness.model("m")
    harness.faults_for_model["m"] = "--crash-after-tokens 3"
    client = await harness.start()
    records = await _ndjson(client, "/api/chat", CHAT_BODY)
    assert set(records[-1]) == {"error"}
    # Two tokens fit under the crash point: the relaunched backend answers in full.
    again = await _ndjson(client, "/api/chat", CHAT_BODY | {"options": {"num_predict": 2}})
    assert again[-1]["done"] is True


def _rows(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT route, model, status, upstream_status, bytes_in, bytes_out"
            " FROM analytics_events ORDER BY time"
        ).fetchall()


async def test_d2_translated_requests_record_traffic_and_upstream_status(
    harness: RouterHarness,
) -> None:
    harness.model("m")
    harness.model("embed", embeddingsmodel="embed.gguf")
    client = await harness.start()
    answer = await client.post("/api/chat", json=CHAT_BODY | {"stream": False})
    assert answer.status_code == 200 and answer.json()["done"] is True
    streamed = await _ndjson(client, "/api/generate", GENERATE_BODY)
    assert streamed[-1]["done"] is True
    assert (await client.post("/api/embed", json={"model": "embed", "input": "x"})).is_success
    assert (await client.post("/router/v1/site/analytics/flush")).json()["persisted"] == ["local"]
    rows = _rows(harness.tmp / "data" / "router.sqlite")
    assert [r[:4] for r in rows] == [
        ("/api/chat", "m", 200, 200),
        ("/api/generate", "m", 200, 200),
        ("/api/embed", "embed", 200, 200),
    ]
    for route, *_, bytes_in, bytes_out in rows:
        assert bytes_in > 20 and bytes_out > 20, route
    # The usage report is read from the answer the client got (Ollama's counters).
    with sqlite3.connect(harness.tmp / "data" / "router.sqlite") as conn:
        tokens = conn.execute(
            "SELECT completion_tokens FROM analytics_events WHERE route != '/api/embed' ORDER BY time"
        ).fetchall()
    assert tokens == [(answer.json()["eval_count"],), (streamed[-1]["eval_count"],)]


async def test_translated_request_retries_a_refused_connect(harness: RouterHarness) -> None:
    """R30 on the Ollama path: the backend's port refuses connections for 300 ms after the lease
    was granted (a backend that restarted its listener); the request is sent once it listens."""
    harness.model("m")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "m"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    hits = 0

    async def answer(_: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        choice = {"index": 0, "message": {"role": "assistant", "content": "hi"}}
        return web.json_response(
            {"object": "chat.completion", "choices": [choice | {"finish_reason": "stop"}]}
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    real_base, runtime.base_url = runtime.base_url, f"http://127.0.0.1:{port}"
    try:

        async def listen_later() -> None:
            await asyncio.sleep(0.3)
            await web.TCPSite(runner, "127.0.0.1", port).start()

        later = asyncio.create_task(listen_later())
        r = await client.post("/api/chat", json=CHAT_BODY | {"stream": False})
        await later
        assert r.status_code == 200, r.text
        assert r.json()["message"]["content"] == "hi" and hits == 1
    finally:
        runtime.base_url = real_base
        await runner.cleanup()


async def test_client_abort_of_a_translated_stream_reaches_the_backend_and_is_499(
    harness: RouterHarness,
) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("m")
    harness.faults["llamacpp"] = f"--token-rate 20 --record-requests {record}"
    client = await harness.start()
    body = CHAT_BODY | {"options": {"num_predict": 200}}
    async with client.stream("POST", "/api/chat", json=body) as r:
        seen = 0
        async for line in r.aiter_lines():
            seen += line.startswith('{"model"')
            if seen == 3:
                break

    def disconnected() -> bool:
        return any(x.get("disconnected") for x in harness.records(record))

    assert await _until(disconnected), "the backend never saw the client go away"
    assert (await client.post("/router/v1/site/analytics/flush")).json()["persisted"] == ["local"]
    assert await _until(lambda: bool(_rows(harness.tmp / "data" / "router.sqlite")))
    (row,) = _rows(harness.tmp / "data" / "router.sqlite")
    assert row[:4] == ("/api/chat", "m", 499, 200)


async def test_refusals_before_forwarding_are_recorded(harness: RouterHarness) -> None:
    harness.model("m")
    client = await harness.start()
    assert (await client.post("/api/chat", content=b"{nope")).status_code == 400
    assert (await client.post("/api/chat", json={"model": "x", "messages": []})).status_code == 404
    bad = CHAT_BODY | {"messages": [{"role": "robot", "content": "hi"}]}
    assert (await client.post("/api/chat", json=bad)).status_code == 400
    assert (await client.post("/router/v1/site/analytics/flush")).json()["persisted"] == ["local"]
    rows = _rows(harness.tmp / "data" / "router.sqlite")
    assert [(r[0], r[2]) for r in rows] == [
        ("/api/chat", 400),
        ("/api/chat", 404),
        ("/api/chat", 400),
    ]
    assert harness.runtimes.spawn_count == 0  # a refused body never loads a model


async def test_jinja_profile_travels_with_an_ollama_chat(harness: RouterHarness) -> None:
    """Two profiles of one model share a runtime, so the kwargs must be in each request, on
    the Ollama surface as on the OpenAI one; the backend gets its own model ID."""
    bodies = harness.tmp / "bodies.jsonl"
    harness.faults["llamacpp"] = f"--record-bodies {bodies}"
    harness.model("think", model_param="qwen.gguf", jinja_kwargs={"enable_thinking": True})
    harness.model("nothink", model_param="qwen.gguf", jinja_kwargs={"enable_thinking": False})
    client = await harness.start()
    for model in ("think", "nothink"):
        r = await client.post(
            "/api/chat", json=CHAT_BODY | {"model": model, "stream": False, "think": True}
        )
        assert r.status_code == 200 and r.json()["model"] == model
    assert harness.runtimes.spawn_count == 1
    sent = [json.loads(line)["body"] for line in bodies.read_text().splitlines()]
    assert [b["chat_template_kwargs"] for b in sent] == [
        {"enable_thinking": True},
        {"enable_thinking": False},  # the config wins by default (jinja_precedence)
    ]
    (runtime,) = harness.runtimes.runtimes()
    assert {b["model"] for b in sent} == {runtime.local_model_id or "think"}


async def test_legacy_embeddings_load_request_answers_in_the_legacy_shape(
    harness: RouterHarness,
) -> None:
    harness.model("embed", embeddingsmodel="embed.gguf")
    client = await harness.start()
    r = await client.post("/api/embeddings", json={"model": "embed"})
    assert r.status_code == 200 and r.json() == {"embedding": []}
    assert harness.runtimes.status_of("embed") == "ready"


async def _until(predicate: Callable[[], bool], deadline: float = 10.0) -> bool:
    """Poll another process's view (a file, a database) until it shows the event."""
    end = time.monotonic() + deadline
    while not predicate():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_hung_backend_ends_the_stream_with_an_error_and_is_failed(
    harness: RouterHarness,
) -> None:
    """R9 on the Ollama path: the stall deadline ends the stream in NDJSON and the stalled
    backend (its /health still fine) is reported and stopped."""
    harness.model("m")
    harness.faults["llamacpp"] = "--hang-after-tokens 3 --token-rate 50"
    client = await harness.start(harness.settings(stream_idle_timeout=0.6, stop_grace=1))
    assert (await client.post("/router/v1/load", json={"model": "m"})).status_code == 200
    (first,) = harness.runtimes.runtimes()
    records = await _ndjson(client, "/api/chat", CHAT_BODY | {"options": {"num_predict": 10}})
    assert len(records) == 4 and set(records[-1]) == {"error"}
    assert "sent nothing" in records[-1]["error"]
    assert first.process is not None
    assert await _until(lambda: first.process.returncode is not None)


async def test_a_client_that_stops_reading_frees_the_backend(harness: RouterHarness) -> None:
    """R22 on the Ollama path: past the send deadline the stream is cut and the lease freed."""
    harness.model("m")
    client = await harness.start(harness.settings(stream_idle_timeout=1))
    assert (await client.post("/router/v1/load", json={"model": "m"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    assert harness.server is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", harness.server.port, limit=1024)
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    payload = json.dumps(CHAT_BODY | {"options": {"num_predict": 100_000}}).encode()
    writer.write(
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    try:
        assert (await asyncio.wait_for(reader.read(1024), 10)).startswith(b"HTTP/1.1 200")
        assert runtime.leases == 1
        # Read nothing more. The kernel's socket buffers take some megabytes first (seconds on
        # a busy machine), then the 1 s send deadline cuts the stream long before its end.
        assert await _until(lambda: runtime.leases == 0, 60), "the stalled stream held its lease"
    finally:
        writer.close()
    assert (await client.post("/router/v1/site/analytics/flush")).json()["persisted"] == ["local"]
    db = harness.tmp / "data" / "router.sqlite"
    assert await _until(lambda: any(r[0] == "/api/chat" for r in _rows(db)))
    with sqlite3.connect(db) as conn:
        (status, message) = conn.execute(
            "SELECT status, error_message FROM analytics_events WHERE route = '/api/chat'"
        ).fetchone()
    assert status == 499 and "client read nothing" in message
