"""Issue 33: a request that fits the `.kcpps` `contextsize` answers however many others share
the runtime (docs/kcpps.md, "Context and parallel slots").

The real llama-server and the demo chat model, `contextsize` 2048. Three concurrent requests of
~1,200 tokens each need 3,600 cells together: with llama-server's automatic slots sharing one
2,048-cell cache (the launch before this issue) a stream ends in "Context size has been
exceeded". With one slot (the default) they take turns; with `parallel` 3 each slot has its
own 2,048 cells and they run at once. Open WebUI's pattern, a long chat and a title request
sent within 50 ms, answers too.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.real.router_fixtures import write_config
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]

# ~1,200 tokens with the demo tokenizer; three of them pass 2,048 cells together.
LONG = " ".join(f"line {i} of the story about the river and the mill." for i in range(52))
TOKENS = 8


def _long(n: int) -> str:
    return f"Request {n}. {LONG}"  # a different prefix each: no shared cache between them


async def _openai(h: RouterHarness, model: str, content: str) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    body |= {"max_tokens": TOKENS, "temperature": 0}
    response = await h.client.post("/v1/chat/completions", json=body, timeout=180)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


async def _ollama_stream(h: RouterHarness, model: str, content: str) -> list[dict[str, Any]]:
    """Every record of an Ollama /api/chat stream (Open WebUI's path)."""
    body = {"model": model, "messages": [{"role": "user", "content": content}], "stream": True}
    body["options"] = {"num_predict": TOKENS, "temperature": 0}
    async with h.client.stream("POST", "/api/chat", json=body, timeout=180) as response:
        assert response.status_code == 200, await response.aread()
        return [json.loads(line) async for line in response.aiter_lines() if line.strip()]


def _answered_openai(reply: dict[str, Any]) -> int:
    """The prompt's token count of a whole answer (a failed one has asserted already)."""
    assert reply["choices"][0]["message"]["content"], reply
    assert reply["usage"]["completion_tokens"] > 0, reply
    return int(reply["usage"]["prompt_tokens"])


def _answered_ollama(records: list[dict[str, Any]]) -> int:
    assert not any("error" in r for r in records), records[-3:]
    last = records[-1]
    assert last["done"] is True and last["eval_count"] > 0, last
    text = "".join(r.get("message", {}).get("content", "") for r in records)
    assert text, records
    return int(last["prompt_eval_count"])


async def _three_at_once(h: RouterHarness, model: str) -> None:
    await _openai(h, model, "hello")  # loaded first: the three meet a running server
    replies = await asyncio.gather(*(_openai(h, model, _long(n)) for n in range(3)))
    prompts = [_answered_openai(r) for r in replies]
    assert all(1100 < p < 2048 for p in prompts) and sum(prompts) > 2048, prompts
    streams = await asyncio.gather(*(_ollama_stream(h, model, _long(n + 3)) for n in range(3)))
    counts = [_answered_ollama(s) for s in streams]
    assert sum(counts) > 2048, counts


def _argv_of(h: RouterHarness, model: str) -> list[str]:
    [runtime] = [rt for rt in h.runtimes.runtimes() if rt.config.id == model]
    return list(runtime.argv)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize(
    ("slots", "launched"),
    [({}, ("2048", "1")), ({"parallel": 3}, ("6144", "3"))],  # 2,048 cells per slot
    ids=["one-slot", "three-slots"],
)
async def test_three_long_requests_all_answer(
    real_harness: RouterHarness,
    demo_text: dict[str, Path],
    slots: dict[str, int],
    launched: tuple[str, str],
) -> None:
    h = real_harness
    write_config(h, "chat-a", model_param=demo_text["chat-a"], contextsize=2048, **slots)
    await h.start(h.settings())
    await _three_at_once(h, "chat-a")
    argv = _argv_of(h, "chat-a")
    assert (_flag(argv, "-c"), _flag(argv, "-np")) == launched


async def test_open_webui_chat_and_title_in_the_same_50_ms_both_answer(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    write_config(h, "chat-a", model_param=demo_text["chat-a"], contextsize=2048, parallel=2)
    await h.start(h.settings())
    await _openai(h, "chat-a", "hello")
    history = _long(7)
    chat = asyncio.create_task(_ollama_stream(h, "chat-a", history))
    await asyncio.sleep(0.03)  # the title request follows within 50 ms, as Open WebUI's does
    title_prompt = f"Create a concise title for this chat: {LONG}"
    title = await _openai(h, "chat-a", title_prompt)
    assert _answered_openai(title) + _answered_ollama(await chat) > 2048
