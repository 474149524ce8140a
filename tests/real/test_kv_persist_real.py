"""KV caches survive swaps (docs/swaps.md, "KV persistence") with the real llama-server.

A long conversation on chat-a, a one-per-lane swap to chat-b and back, then the next turn on
chat-a: with `router_kv_persist: on` the backend reports most of the history as cached; with it
off, almost nothing is (the control that shows the check can fail). A changed context size
restores nothing, and a damaged cache file falls back to a plain prefill with no client error.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from router.appkeys import CATALOG, EVENTS
from tests.real.router_fixtures import write_config
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]

# About 1,200 tokens with the demo tokenizer: well under the demo model's 2,048-token
# training context (a longer prompt is cut to nothing; shared/notes/swap-path.md section 3).
HISTORY = " ".join(f"line {i} of the story about the river and the mill." for i in range(55))
GEN = {"max_tokens": 4, "temperature": 0, "seed": 42}


async def _start(h: RouterHarness, demo: dict[str, Path], persist: str, ctx: int = 2048) -> None:
    write_config(
        h, "chat-a", model_param=demo["chat-a"], router_kv_persist=persist, contextsize=ctx
    )
    write_config(h, "chat-b", model_param=demo["chat-b"])
    await h.start(h.settings())


def _kv_events(h: RouterHarness) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    # chat-a's only: chat-b has the default (auto) and runs its own probe.
    h.app[EVENTS].subscribe_callback(
        lambda e: seen.append(e) if e["event"] == "kv_cache" and e["model"] == "chat-a" else None
    )
    return seen


async def _chat(h: RouterHarness, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": model, "messages": messages, **GEN}
    response = await h.client.post("/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _cached(reply: dict[str, Any]) -> int:
    details = reply.get("usage", {}).get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    if isinstance(cached, int):
        return cached
    return int(reply.get("timings", {}).get("cache_n", 0))


async def _turn_after_swap(h: RouterHarness) -> tuple[int, dict[str, Any]]:
    """First turn on chat-a, a swap to chat-b and back; returns (history tokens, next reply)."""
    first = [{"role": "user", "content": HISTORY}]
    reply = await _chat(h, "chat-a", first)
    history = int(reply["usage"]["prompt_tokens"])
    assert 800 < history < 1900, history  # long, and under the training context
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])  # one per lane: a swap
    assert h.runtimes.status_of("chat-a") == "unloaded"
    answer = reply["choices"][0]["message"]["content"]
    follow = [
        *first,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "go on"},
    ]
    return history, await _chat(h, "chat-a", follow)


@pytest.mark.parametrize("persist", ["on", "auto", "off"])
async def test_conversation_returns_with_its_cache(
    real_harness: RouterHarness, demo_text: dict[str, Path], persist: str
) -> None:
    await _start(real_harness, demo_text, persist)
    events = _kv_events(real_harness)
    history, reply = await _turn_after_swap(real_harness)
    cached = _cached(reply)
    results = [(e["action"], e["result"]) for e in events]
    if persist == "auto":  # the probe ran once, at the first load, and passed
        assert results.count(("probe", "passed")) == 1, events
        probes = json.loads((real_harness.tmp / "data" / "kv-cache" / "probes.json").read_text())
        assert len(probes) == 2 and all(p["passed"] for p in probes.values()), probes
    if persist in ("on", "auto"):
        assert cached >= 0.9 * history, (cached, history, events)
        assert ("save", "ok") in results and ("restore", "ok") in results, events
    else:
        assert cached < 0.1 * history, (cached, history)
        assert events == []


async def _saved_by_a_swap(
    h: RouterHarness, demo: dict[str, Path]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """chat-a answers the history, then a swap to chat-b saves its slot; (events, history)."""
    await _start(h, demo, "on")
    events = _kv_events(h)
    first = [{"role": "user", "content": HISTORY}]
    await _chat(h, "chat-a", first)
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])
    first_load = [("restore", "none"), ("save", "ok")]  # nothing saved yet at the first load
    assert [(e["action"], e["result"]) for e in events] == first_load, events
    return events, first


async def test_changed_context_never_restores(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    events, first = await _saved_by_a_swap(h, demo_text)
    write_config(
        h, "chat-a", model_param=demo_text["chat-a"], router_kv_persist="on", contextsize=1536
    )
    await h.app[CATALOG].refresh()
    reply = await _chat(h, "chat-a", first)
    assert _cached(reply) < 10, reply
    restores = [e for e in events if e["action"] == "restore"]
    assert [e["result"] for e in restores] == ["none", "none"], events


async def test_damaged_cache_file_falls_back_to_a_plain_prefill(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    events, first = await _saved_by_a_swap(h, demo_text)
    files = sorted((h.tmp / "data" / "kv-cache").glob("*/*.bin"))
    assert files, "nothing was saved"
    for path in files:
        data = bytearray(path.read_bytes())
        for i in range(len(data) // 2, len(data), 97):
            data[i] ^= 0x5A  # KV values only: the backend's own checks would not notice
        path.write_bytes(bytes(data))
    reply = await _chat(h, "chat-a", first)  # no error to the client
    assert _cached(reply) < 10, reply
    restores = [e for e in events if e["action"] == "restore"]
    assert [e["result"] for e in restores] == ["none", "failed"], events
    await asyncio.sleep(0)
    assert not any(path.exists() for path in files), "a damaged file must be removed"
