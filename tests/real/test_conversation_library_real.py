"""The conversation library with the real llama-server and the demo models (docs/swaps.md,
"The conversation library").

Three conversations X, Y and Z on `chat-a` (`router_kv_persist: on`), a swap to `chat-b` and
back: each returning turn has >= 90 % of its prompt cached and the same greedy answer (and top
log-probabilities) as the same turn on `chat-ref` (the same model file, persistence off, so no
library: a plain prefill). The same after a router restart on the same state folder. An edited
earlier message gets no state that does not match it, and the disk cap holds with 20
conversations. (A damaged file falling back to a plain prefill: test_kv_persist_real.py, whose
prompts now go through the library.)
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from router.appkeys import EVENTS
from router.config import Settings
from tests.real.router_fixtures import write_config
from tests.real.test_kv_persist_real import _cached
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]

GEN = {"max_tokens": 4, "temperature": 0, "seed": 42, "logprobs": True, "top_logprobs": 3}
Messages = list[dict[str, str]]


def _history(tag: str, lines: int = 45) -> Messages:
    """About 1,130 tokens per conversation at 45 lines (three do not fit one 2,048 cache)."""
    text = " ".join(
        f"{tag} line {i} of the story about the river and the mill." for i in range(lines)
    )
    return [{"role": "user", "content": text}]


async def _chat(h: RouterHarness, model: str, messages: Messages) -> dict[str, Any]:
    body = {"model": model, "messages": messages, **GEN}
    response = await h.client.post("/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _follow(first: Messages, reply: dict[str, Any]) -> Messages:
    answer = reply["choices"][0]["message"]["content"]
    return [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "go on"}]


def _top(reply: dict[str, Any]) -> list[tuple[int, float]]:
    steps = reply["choices"][0]["logprobs"]["content"]
    return [(c["id"], c["logprob"]) for step in steps for c in step["top_logprobs"]]


def _same_answer(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["choices"][0]["message"] == want["choices"][0]["message"]
    mine, theirs = _top(got), _top(want)
    assert [t for t, _ in mine] == [t for t, _ in theirs]
    assert [p for _, p in mine] == pytest.approx([p for _, p in theirs], abs=1e-3)


def _configs(h: RouterHarness, demo: dict[str, Path]) -> Settings:
    for name, persist in (("chat-a", "on"), ("chat-ref", "off")):
        write_config(
            h, name, model_param=demo["chat-a"], router_kv_persist=persist, contextsize=2048
        )
    write_config(h, "chat-b", model_param=demo["chat-b"], router_kv_persist="off")
    return h.settings()


def _events(h: RouterHarness) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    h.app[EVENTS].subscribe_callback(
        lambda e: seen.append(e) if e["event"] == "kv_cache" and e["model"] == "chat-a" else None
    )
    return seen


async def _references(h: RouterHarness, firsts: dict[str, Messages]) -> dict[str, Any]:
    """Each conversation's first and second turn on chat-ref: a plain prefill, no library."""
    found: dict[str, Any] = {}
    for tag, first in firsts.items():
        reply = await _chat(h, "chat-ref", first)
        found[tag] = (reply, await _chat(h, "chat-ref", _follow(first, reply)))
    return found


async def _returns(
    h: RouterHarness, firsts: dict[str, Messages], replies: dict[str, Any], refs: dict[str, Any]
) -> None:
    for tag, first in firsts.items():
        history = int(replies[tag]["usage"]["prompt_tokens"])
        returned = await _chat(h, "chat-a", _follow(first, replies[tag]))
        assert _cached(returned) >= 0.9 * history, (tag, _cached(returned), history)
        _same_answer(returned, refs[tag][1])


async def _first_turns(h: RouterHarness, firsts: dict[str, Messages]) -> dict[str, Any]:
    return {tag: await _chat(h, "chat-a", first) for tag, first in firsts.items()}


FIRSTS = {tag: _history(tag) for tag in "XYZ"}


async def test_three_conversations_return_cached_after_a_swap(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    await h.start(_configs(h, demo_text))
    events = _events(h)
    refs = await _references(h, FIRSTS)
    replies = await _first_turns(h, FIRSTS)
    for tag, reply in replies.items():
        assert reply["choices"][0]["message"] == refs[tag][0]["choices"][0]["message"]
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])  # the swap
    assert h.runtimes.status_of("chat-a") == "unloaded"
    [save] = [e for e in events if e["action"] == "save"]
    assert save["result"] == "ok" and save["conversations"] == 3, events
    await _returns(h, FIRSTS, replies, refs)


async def test_conversations_return_cached_after_a_router_restart(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    settings = _configs(h, demo_text)
    await h.start(settings)
    refs = await _references(h, FIRSTS)
    replies = await _first_turns(h, FIRSTS)
    await h.close()  # the router's shutdown saves chat-a's conversations
    folder = h.tmp / "data" / "kv-cache"
    index = folder / "library.json"
    assert "river" not in index.read_text()  # digests, never prompt text
    files = [index, *folder.glob("*/*-conv*.bin")]
    assert len(files) == 4, files
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files), files
    await h.start(settings)
    await _returns(h, FIRSTS, replies, refs)


async def test_an_edited_earlier_message_gets_no_wrong_state(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    await h.start(_configs(h, demo_text))
    replies = await _first_turns(h, FIRSTS)
    edited = _follow(FIRSTS["X"], replies["X"])
    edited[0] = {"role": "user", "content": "Edited. " + edited[0]["content"]}
    reference = await _chat(h, "chat-ref", edited)  # a plain prefill of the edited prompt
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])
    events = _events(h)
    got = await _chat(h, "chat-a", edited)
    _same_answer(got, reference)
    assert _cached(got) < 0.1 * int(got["usage"]["prompt_tokens"]), got["usage"]
    # The load restored the newest conversation (Z); no state was restored for this prompt.
    assert [e["action"] for e in events if e["action"] == "restore"] == ["restore"], events


async def test_the_disk_cap_holds_with_twenty_conversations(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    _configs(h, demo_text)
    budget = 1_000_000  # a few of twenty ~300-token states (about 520 bytes a token)
    await h.start(h.settings(kv_cache_dir_budget=budget))
    firsts = {f"c{i}": _history(f"c{i}", 10) for i in range(20)}
    replies = await _first_turns(h, firsts)
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])
    folder = h.tmp / "data" / "kv-cache"
    sizes = [p.stat().st_size for p in folder.glob("*/*.bin")]
    assert 2 <= len(sizes) and sum(sizes) <= budget, sizes
    kept = json.loads((folder / "library.json").read_text())["conversations"]
    assert len(kept) == len(sizes), kept
    newest = "c19"  # the most recently used is kept, and returns cached
    history = int(replies[newest]["usage"]["prompt_tokens"])
    returned = await _chat(h, "chat-a", _follow(firsts[newest], replies[newest]))
    assert _cached(returned) >= 0.9 * history, (_cached(returned), history)


async def test_the_unload_api_erases_a_configurations_conversations(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    await h.start(_configs(h, demo_text))
    replies = await _first_turns(h, FIRSTS)
    folder = h.tmp / "data" / "kv-cache"
    unknown = {"target": "all", "forget_conversations": "nope"}
    assert (await h.client.post("/router/v1/unload", json=unknown)).status_code == 404
    asked = {"target": "all", "forget_conversations": "chat-a"}
    answer = (await h.client.post("/router/v1/unload", json=asked)).json()
    assert answer["forgotten"] == 3 and answer["unloaded"], answer  # saved by the unload
    assert list(folder.glob("*/*-conv*")) == []
    assert json.loads((folder / "library.json").read_text())["conversations"] == []
    returned = await _chat(h, "chat-a", _follow(FIRSTS["X"], replies["X"]))
    assert _cached(returned) < 10, returned["usage"]  # nothing left to restore


async def test_dropping_a_library_leaves_every_runtime_loaded(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    """The model page's Drop (`forget_conversations` with no target) erases chat-a's library
    and unloads nothing: chat-a and chat-b stay resident, and chat-a's later stop saves none
    of the conversations it still holds in memory."""
    h = real_harness
    _configs(h, demo_text)
    await h.start(h.settings(residency="memory"))  # room for chat-a and chat-b together
    replies = await _first_turns(h, FIRSTS)
    await h.client.post("/router/v1/unload", json={"target": "text"})  # saves the three
    folder = h.tmp / "data" / "kv-cache"
    assert len(list(folder.glob("*/*-conv*.bin"))) == 3
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])
    returned = await _chat(h, "chat-a", _follow(FIRSTS["X"], replies["X"]))  # restored, live
    assert _cached(returned) >= 0.9 * int(replies["X"]["usage"]["prompt_tokens"])
    asked = {"forget_conversations": "chat-a"}
    answer = (await h.client.post("/router/v1/unload", json=asked)).json()
    assert answer == {"target": None, "unloaded": [], "forgotten": 3}, answer
    assert [h.runtimes.status_of(m) for m in ("chat-a", "chat-b")] == ["ready", "ready"]
    assert list(folder.glob("*/*-conv*")) == []
    assert json.loads((folder / "library.json").read_text())["conversations"] == []
    await h.client.post("/router/v1/unload", json={"target": "all"})  # chat-a's stop
    assert list(folder.glob("*/*-conv*")) == []  # the forgotten X is not written again
