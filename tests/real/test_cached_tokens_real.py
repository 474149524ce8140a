"""Issue 33: each answer's cached prompt tokens reach the client where its API has a field, and
the analytics store them per request (docs/observability.md, "Cached prompt tokens").

The real llama-server and the demo chat model: the same ~500-token prompt twice on each
surface, so the second answer takes all but its last token from the cache.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from router.appkeys import STORE
from tests.real.router_fixtures import write_config
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]

PROMPT = " ".join(f"line {i} of the story about the river." for i in range(30))
MESSAGES = [{"role": "user", "content": PROMPT}]


async def _post(h: RouterHarness, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await h.client.post(path, json=body, timeout=120)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def _streamed_usage(h: RouterHarness) -> dict[str, Any]:
    body = {"model": "chat-a", "messages": MESSAGES, "max_tokens": 3, "stream": True}
    body["stream_options"] = {"include_usage": True}
    usage: dict[str, Any] = {}
    async with h.client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    return usage


async def test_cached_prompt_tokens_reach_the_client_and_the_analytics(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    write_config(h, "chat-a", model_param=demo_text["chat-a"], contextsize=2048)
    await h.start(h.settings())
    chat = {"model": "chat-a", "messages": MESSAGES, "max_tokens": 3, "temperature": 0}
    cold = await _post(h, "/v1/chat/completions", chat)
    prompt = int(cold["usage"]["prompt_tokens"])
    warm = await _post(h, "/v1/chat/completions", chat)
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= prompt - 2, warm["usage"]
    streamed = await _streamed_usage(h)
    assert streamed["prompt_tokens_details"]["cached_tokens"] >= prompt - 2, streamed
    anthropic = await _post(h, "/v1/messages", {**chat, "max_tokens": 3})
    usage = anthropic["usage"]
    assert usage["cache_read_input_tokens"] >= prompt - 2, usage

    store = h.app[STORE]
    await store.flush()
    rows = await store.cache_shares.recent(["chat-a"], time.time())
    share = rows["chat-a"]
    # The four answers: one cold, three warm; every one reported a count and is counted.
    assert share["requests"] == 4, share
    assert share["prompt_tokens"] == 4 * prompt, share
    assert 3 * (prompt - 2) <= share["cached_tokens"] <= 3 * prompt, share
