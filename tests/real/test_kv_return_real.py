"""Issue 26's returning conversation with the real llama-server (docs/swaps.md).

A ~1,500-token conversation on `chat-a` (`router_kv_persist: on`), a forced swap to `chat-b`
and back (one runtime per lane), then the next turn on chat-a. Asserted here are the facts the
events and the backend report: the next turn's `usage.prompt_tokens_details.cached_tokens`
covers at least 90 % of the history, the slot was saved at the swap and restored at the
return, and the answer is the same greedy answer (and top log-probabilities) as the same turn
without any swap (`chat-ref`: the same model file with persistence off, answering both turns
in one process).
The time-to-first-token ratio is a benchmark figure (bench/kv_return.py), never a timed test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from router.appkeys import EVENTS
from tests.real.router_fixtures import write_config
from tests.real.test_kv_persist_real import _cached
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]

# ~1,500 tokens with the demo tokenizer, under the 2,048-token training context.
HISTORY = " ".join(f"line {i} of the story about the river and the mill." for i in range(65))
GEN = {"max_tokens": 6, "temperature": 0, "seed": 42, "logprobs": True, "top_logprobs": 3}


async def _chat(h: RouterHarness, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": model, "messages": messages, **GEN}
    response = await h.client.post("/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _top(reply: dict[str, Any]) -> list[tuple[int, float]]:
    """(token id, logprob) of the top candidates at every generated step."""
    steps = reply["choices"][0]["logprobs"]["content"]
    return [(c["id"], c["logprob"]) for step in steps for c in step["top_logprobs"]]


def _follow(first: list[dict[str, str]], reply: dict[str, Any]) -> list[dict[str, str]]:
    answer = reply["choices"][0]["message"]["content"]
    return [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "go on"}]


async def test_the_next_turn_after_a_swap_reuses_the_restored_history(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    write_config(
        h, "chat-a", model_param=demo_text["chat-a"], router_kv_persist="on", contextsize=2048
    )
    write_config(
        h, "chat-ref", model_param=demo_text["chat-a"], router_kv_persist="off", contextsize=2048
    )
    write_config(h, "chat-b", model_param=demo_text["chat-b"], router_kv_persist="off")
    await h.start(h.settings())
    events: list[dict[str, Any]] = []
    h.app[EVENTS].subscribe_callback(
        lambda e: events.append(e) if e["event"] == "kv_cache" and e["model"] == "chat-a" else None
    )
    first = [{"role": "user", "content": HISTORY}]

    # The reference: both turns in one process, no swap between them.
    ref_first = await _chat(h, "chat-ref", first)
    reference = await _chat(h, "chat-ref", _follow(first, ref_first))

    reply = await _chat(h, "chat-a", first)
    history = int(reply["usage"]["prompt_tokens"])
    assert 1300 < history < 1900, history  # ~1,500, under the training context
    assert reply["choices"][0]["message"] == ref_first["choices"][0]["message"]
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])  # the forced swap
    assert h.runtimes.status_of("chat-a") == "unloaded"
    returned = await _chat(h, "chat-a", _follow(first, reply))

    assert _cached(returned) >= 0.9 * history, (_cached(returned), history, events)
    outcomes = [(e["action"], e["result"]) for e in events]
    assert outcomes == [("restore", "none"), ("save", "ok"), ("restore", "ok")], events
    saved, restored = events[1], events[2]
    assert restored["tokens"] == saved["tokens"] >= history, events
    assert returned["choices"][0]["message"] == reference["choices"][0]["message"]
    # The demo model's weights are noise, so its greedy text is nearly constant; the top
    # candidates' log-probabilities at each step show the restored state is the same state.
    got, want = _top(returned), _top(reference)
    assert [t for t, _ in got] == [t for t, _ in want]
    assert [p for _, p in got] == pytest.approx([p for _, p in want], abs=1e-4)
    assert _cached(reference) >= 0.9 * history  # the reference reused its in-process cache


async def test_the_probe_verdict_reaches_the_inventory(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    """`auto`: the probe at the first load is stored under the key the inventory computes for
    the configuration as it would launch now (the model detail page reads it there)."""
    h = real_harness
    write_config(h, "chat-a", model_param=demo_text["chat-a"], contextsize=2048)
    await h.start(h.settings())

    async def kv_persist() -> dict[str, Any]:
        answer = (await h.client.get("/router/v1/site/inventory")).json()
        [record] = [m for m in answer["models"] if m["id"] == "chat-a"]
        found: dict[str, Any] = record["kv_persist"]
        return found

    assert await kv_persist() == {
        "mode": "auto",
        "enabled": False,
        "probe": None,
        # issue 33: the conversation library of this configuration, empty before any request
        "conversations": {"count": 0, "bytes": 0, "tokens": 0, "last_used": None},
        "save": None,  # issue 33: the last save and restore of this run, none yet
        "restore": None,
        "warning": None,
    }
    assert (await h.client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    status = await kv_persist()
    assert status["enabled"] is True and status["probe"]["passed"] is True, status
    assert status["probe"]["same_answer"] is True
    # The load restored nothing (no saved file yet): a restore that is no failure, no warning.
    assert status["restore"]["result"] == "none" and status["warning"] is None, status
