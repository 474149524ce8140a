"""Issue 36: a stream the backend ends with an error event ("Context size has been exceeded."
mid-answer) is recorded in the analytics as a failure with the backend's message, not as the
200 its status line said; on the OpenAI surface (SSE passed through) and through the Ollama
translation (NDJSON).

Real router, fake llama-server through the real supervisor (`--error-after-tokens`), the real
SQLite store's row read after a flush. The pure reading of a stream's end is tested below it.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import httpx
import pytest

from router.forwarding import stream_error
from tests.support.harness import RouterHarness

MESSAGE = "Context size has been exceeded."
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def _streamed(client: httpx.AsyncClient, path: str) -> bytes:
    async with client.stream("POST", path, json=CHAT) as r:
        assert r.status_code == 200
        return await r.aread()


async def _rows(harness: RouterHarness, client: httpx.AsyncClient) -> list[tuple[Any, ...]]:
    assert (await client.post("/router/v1/site/analytics/flush")).json()["persisted"] == ["local"]
    with sqlite3.connect(harness.tmp / "data" / "router.sqlite") as conn:
        return conn.execute(
            "SELECT route, status, upstream_status, error_message FROM analytics_events"
            " WHERE route NOT LIKE '/router/%' ORDER BY time"
        ).fetchall()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
async def test_a_stream_ended_by_a_backend_error_is_recorded_as_failed(
    harness: RouterHarness, path: str
) -> None:
    harness.model("m")
    harness.faults["llamacpp"] = "--error-after-tokens 2"
    client = await harness.start()
    body = await _streamed(client, path)
    assert MESSAGE.encode() in body  # the client saw the backend's error
    assert await _rows(harness, client) == [(path, 502, 200, MESSAGE)]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
async def test_a_finished_stream_stays_a_success(harness: RouterHarness, path: str) -> None:
    harness.model("m")
    client = await harness.start()
    await _streamed(client, path)
    assert await _rows(harness, client) == [(path, 200, 200, None)]


# ---- the stream's end, read from its last bytes ------------------------------------------

SSE = "text/event-stream"
NDJSON = "application/x-ndjson"


def _sse(*objs: Any) -> bytes:
    return b"".join(
        b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs
    )


def test_an_error_event_ends_the_stream_even_before_done() -> None:
    tail = _sse({"choices": []}, {"error": {"message": MESSAGE, "code": 400}}, b"[DONE]")
    assert stream_error(SSE, tail) == MESSAGE


def test_llama_server_error_field_and_a_named_error_event() -> None:
    assert stream_error(SSE, b'error: {"message": "boom"}\n\n') == "boom"
    assert stream_error(SSE + "; charset=utf-8", b'event: error\ndata: {"error": "x"}\n\n') == "x"


def test_an_error_the_stream_went_on_after_or_the_word_in_text_is_no_failure() -> None:
    recovered = _sse({"error": {"message": "slot busy"}}, {"choices": [{"delta": {}}]})
    assert stream_error(SSE, recovered) is None
    words = _sse({"choices": [{"delta": {"content": '{"error": 1}'}}]}, b"[DONE]")
    assert stream_error(SSE, words) is None
    assert stream_error(SSE, _sse({"type": "response.completed", "error": None})) is None


def test_ndjson_records_and_other_bodies() -> None:
    assert stream_error(NDJSON, b'{"done": false}\n{"error": "Context size"}\n') == "Context size"
    assert stream_error(NDJSON, b'{"error": "x"}\n{"done": true}\n') is None
    assert stream_error("application/json", b'{"error": "x"}') is None
