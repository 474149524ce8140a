"""R24: a non-streamed answer is waited for as long as the backend works on it.

llama-server sends a non-streamed answer only when the generation is done, so the stream idle
deadline (`runtime.stream_idle_timeout`) must not run before it: the wait is bounded by
`runtime.response_timeout` instead, and a backend that dies meanwhile is a 502 at once.
Real router socket, the fake backend launched through the real supervisor (tests/harness.py).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.harness import RouterHarness, chat

CHAT = "/v1/chat/completions"


async def _ask_loaded(
    harness: RouterHarness, faults: str, **runtime: Any
) -> tuple[httpx.Response, float]:
    """One non-streamed chat to a loaded fake backend with `faults`: the answer and the wait."""
    harness.model("chat-a")
    harness.faults["llamacpp"] = faults
    client = await harness.start(harness.settings(**runtime))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    started = time.monotonic()
    r = await client.post(CHAT, json=chat("chat-a", max_tokens=3), timeout=30)
    return r, time.monotonic() - started


async def test_r24_a_slow_whole_answer_outlives_the_stream_idle_deadline(
    harness: RouterHarness,
) -> None:
    # The backend computes for 1.5 s, three times the idle deadline, then answers whole.
    r, waited = await _ask_loaded(harness, "--ttft 1.5", stream_idle_timeout=0.5)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2 "
    assert waited >= 1.5
    # The backend was not taken for a hung one.
    assert harness.runtimes.status_of("chat-a") == "ready"


async def test_r24_a_whole_answer_past_response_timeout_is_504(harness: RouterHarness) -> None:
    r, waited = await _ask_loaded(harness, "--ttft 30", stream_idle_timeout=60, response_timeout=1)
    assert r.status_code == 504, r.text
    assert "runtime.response_timeout" in r.json()["error"]["message"]
    assert 1.0 <= waited < 10.0


async def test_r24_a_backend_dying_during_a_whole_answer_is_502(harness: RouterHarness) -> None:
    # The backend exits 1 s into the generation; the response deadline is far away.
    r, waited = await _ask_loaded(
        harness, "--ttft 1 --crash-after-tokens 0", stream_idle_timeout=0.3, response_timeout=60
    )
    assert r.status_code == 502, r.text
    assert r.json()["error"]["message"]
    assert 1.0 <= waited < 10.0
