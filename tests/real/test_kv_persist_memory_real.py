"""KV caches survive a memory eviction too (issue 26: "works with the memory-aware residency's
evictions"), with the real llama-server: under `runtime.residency: memory` and a host budget
that holds one demo model, chat-b's load evicts chat-a (its slot saved as it stops), and
chat-a's return evicts chat-b and restores the conversation before the next turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.appkeys import CATALOG
from router.domain import Lane
from router.runtime.state import spec_for
from tests.real.router_fixtures import write_config
from tests.real.test_kv_persist_real import HISTORY, _cached, _chat, _kv_events
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]


async def test_a_memory_eviction_saves_and_the_return_restores(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    h = real_harness
    write_config(h, "chat-a", model_param=demo_text["chat-a"], router_kv_persist="on")
    write_config(h, "chat-b", model_param=demo_text["chat-b"], router_kv_persist="off")
    base = h.settings(residency="memory")
    await h.start(base)
    assert h.app is not None
    one = h.runtimes.ledger.holdings.estimate(spec_for(h.app[CATALOG].require("chat-a"), Lane.TEXT))
    await h.close()
    # Room for one of the two (they estimate the same), not both: a load evicts the other.
    budget = one.devices["host"] * 3 // 2
    memory = base.memory.model_copy(update={"host_budget": budget, "reserve": 0})
    await h.start(base.model_copy(update={"memory": memory}))
    events = _kv_events(h)

    first = [{"role": "user", "content": HISTORY}]
    reply = await _chat(h, "chat-a", first)
    history = int(reply["usage"]["prompt_tokens"])
    await _chat(h, "chat-b", [{"role": "user", "content": "hello"}])
    assert h.runtimes.status_of("chat-a") == "unloaded", "chat-b's load did not evict chat-a"
    follow = [
        *first,
        {"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
        {"role": "user", "content": "go on"},
    ]
    again = await _chat(h, "chat-a", follow)
    assert h.runtimes.status_of("chat-b") == "unloaded", "chat-a's return did not evict chat-b"
    results = [(e["action"], e["result"]) for e in events]
    assert ("save", "ok") in results and ("restore", "ok") in results, events
    assert _cached(again) >= 0.9 * history, (_cached(again), history, events)
