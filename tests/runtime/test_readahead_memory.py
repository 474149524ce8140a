"""Read-ahead while a memory eviction drains its victim (`runtime.residency: memory`;
router/runtime/many.py): the load of chat-b must stop a busy chat-a to fit, and chat-b's file
is read ahead while chat-a finishes its request, as a one-per-lane swap does."""

from __future__ import annotations

import asyncio

import pytest

from router.appkeys import CATALOG, EVENTS
from router.config import Settings
from router.domain import Lane
from router.runtime import readahead
from router.runtime.state import spec_for
from tests.runtime.test_readahead_swap import (
    B_SIZE,
    CHAT,
    CHUNK,
    _captures,
    _hold_a,
    _readahead,
    _setup,
)
from tests.support.harness import RouterHarness, chat, wait_for
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("no_measurement")


async def test_a_busy_victim_drains_while_the_incoming_files_are_read_ahead(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readahead, "CHUNK", CHUNK)
    h = harness
    gate, events = _setup(h)
    data = h.settings(stop_grace=1, max_batch_wait=0, residency="memory").model_dump()
    data["analytics"] = {**data["analytics"], "load_capture_enabled": True}
    await h.start(Settings.model_validate(data))
    need = [
        h.runtimes.ledger.holdings.estimate(spec_for(h.app[CATALOG].require(m), Lane.TEXT)).devices[
            "host"
        ]
        for m in ("chat-a", "chat-b")
    ]
    await h.close()
    # Room for either model, not both: chat-b's load must evict chat-a.
    data["memory"] = {**data["memory"], "host_budget": sum(need) - 1, "reserve": 0}
    client = await h.start(Settings.model_validate(data))
    h.app[EVENTS].subscribe_callback(events.append)  # type: ignore[index]
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    a = await _hold_a(h, client)
    b = asyncio.create_task(client.post(CHAT, json=chat("chat-b", max_tokens=1)))

    assert await wait_for(lambda: _readahead(events, "done"), 20), _readahead(events)
    started = _readahead(events, "started")[0]
    assert started["model"] == "chat-b" and started["planned"] == B_SIZE
    assert h.runtimes.spawn_count == 1  # chat-b waits for chat-a's drain
    gate.touch()
    assert (await a).status_code == 200
    assert (await b).status_code == 200
    ahead = (await _captures(h))["chat-b"]["readahead"]
    assert ahead["done"] is True and ahead["bytes"] == B_SIZE
    assert h.runtimes.status_of("chat-a") == "unloaded"
