"""Issue 26: a streamed OpenAI chat that waits for its runtime hears its place in the queue.

Real router, fake backends through the real supervisor; the load is made slow (or failing)
so the request waits longer than `runtime.announce_wait_after`.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.harness import RouterHarness, chat

AFTER = 0.3  # runtime.announce_wait_after for these tests
CHAT = "/v1/chat/completions"


def _settings(harness: RouterHarness):  # type: ignore[no-untyped-def]
    return harness.settings(announce_wait_after=AFTER)


async def _raw_stream(client: httpx.AsyncClient, path: str, body: dict) -> tuple[int, list[str]]:
    async with client.stream("POST", path, json=body, timeout=60) as response:
        lines = [line async for line in response.aiter_lines()]
    return response.status_code, lines


async def test_a_waiting_stream_gets_comment_lines_then_its_answer(harness: RouterHarness) -> None:
    harness.model("slow")
    harness.faults["llamacpp"] = "--startup-delay 1.5"
    client = await harness.start(_settings(harness))
    status, lines = await _raw_stream(client, CHAT, {**chat("slow"), "stream": True})
    assert status == 200
    comments = [line for line in lines if line.startswith(":")]
    assert comments, lines
    assert comments[0].startswith(": waiting, position 1")  # no ETA: never loaded before
    assert "eta" not in comments[0]
    data = [line for line in lines if line.startswith("data:")]
    assert data[-1] == "data: [DONE]"
    assert lines.index(comments[0]) < lines.index(data[0])  # the comments come first


async def test_the_openai_client_parses_an_announced_stream(harness: RouterHarness) -> None:
    harness.model("slow")
    harness.faults["llamacpp"] = "--startup-delay 1.5"
    await harness.start(_settings(harness))
    api = openai.AsyncOpenAI(
        base_url=str(harness.server.make_url("/v1")), api_key="unused", max_retries=0
    )
    stream = await api.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text
    await api.close()


async def test_a_load_failing_after_the_announcement_ends_with_an_error_event(
    harness: RouterHarness,
) -> None:
    harness.model("broken")
    harness.faults_for_model["broken"] = "--startup-delay 1.0 --exit-at-start 3"
    client = await harness.start(_settings(harness))
    status, lines = await _raw_stream(client, CHAT, {**chat("broken"), "stream": True})
    assert status == 200  # committed before the load failed
    assert any(line.startswith(": waiting") for line in lines)
    error = json.loads(next(line for line in lines if line.startswith("data:"))[5:])
    assert error["error"]["message"] and error["error"]["type"]
    api = openai.AsyncOpenAI(
        base_url=str(harness.server.make_url("/v1")), api_key="unused", max_retries=0
    )
    with pytest.raises(openai.APIError):  # the client raises it, as for any stream error
        stream = await api.chat.completions.create(
            model="broken", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for _ in stream:
            pass
    await api.close()


async def test_quick_answers_and_ollama_streams_get_nothing_extra(harness: RouterHarness) -> None:
    harness.model("slow")
    harness.faults["llamacpp"] = "--startup-delay 1.5"
    client = await harness.start(_settings(harness))
    body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    status, lines = await _raw_stream(client, "/api/chat", body)  # waits for the load
    assert status == 200
    assert lines and all(json.loads(line) for line in lines if line)  # NDJSON only
    status, lines = await _raw_stream(client, CHAT, {**chat("slow"), "stream": True})
    assert status == 200
    assert not any(line.startswith(":") for line in lines)  # granted at once: nothing added


async def test_a_refusal_before_the_wait_passes_stays_a_plain_http_error(
    harness: RouterHarness,
) -> None:
    harness.model("broken")
    harness.faults_for_model["broken"] = "--exit-at-start 3"
    client = await harness.start(harness.settings(announce_wait_after=30))
    response = await client.post(CHAT, json={**chat("broken"), "stream": True}, timeout=60)
    assert response.status_code >= 500
    assert response.json()["error"]["message"]
