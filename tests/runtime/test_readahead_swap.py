"""Read-ahead during a drain (issue 26, "Overlap the swap"; router/runtime/readahead.py).

A real router on a real socket with fake backends through the real supervisor. Chat-a's
request is held in flight by the fake backend's gate file, so the lane drains for chat-b for
as long as the test wants; what the read-ahead did is observed through its `readahead` events
and the load capture of chat-b, never through timing.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.appkeys import CATALOG, EVENTS, STORE
from router.config import Settings
from router.domain import Lane
from router.runtime import readahead, residency
from router.runtime.state import spec_for
from router.store import CaptureFilter
from tests.support.harness import RouterHarness, chat, wait_for
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

CHAT = "/v1/chat/completions"
CHUNK = 64 << 10
B_SIZE = 3 * CHUNK + 123  # four chunks, the last one short


def _setup(h: RouterHarness) -> tuple[Path, list[dict[str, Any]]]:
    """chat-a (held by a gate) and chat-b (a file of B_SIZE bytes); the events it publishes."""
    gate = h.tmp / "gate-a"
    h.model("chat-a")
    h.model("chat-b")
    (h.models_dir / "chat-b.gguf").write_bytes(b"GGUF" + bytes(B_SIZE - 4))
    h.faults_for_model["chat-a"] = f"--gate {gate}"
    return gate, []


def _settings(h: RouterHarness, readahead_on: bool = True, **memory: Any) -> Settings:
    # No batching window: the lane drains for chat-b as soon as it waits (docs/swaps.md).
    data = h.settings(stop_grace=1, max_batch_wait=0, readahead=readahead_on).model_dump()
    data["analytics"] = {**data["analytics"], "load_capture_enabled": True}
    data["memory"] = {**data["memory"], **memory}
    return Settings.model_validate(data)


async def _start(h: RouterHarness, settings: Settings, events: list[dict[str, Any]]) -> Any:
    client = await h.start(settings)
    h.app[EVENTS].subscribe_callback(events.append)  # type: ignore[index]
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    return client


async def _hold_a(h: RouterHarness, client: httpx.AsyncClient) -> asyncio.Task[httpx.Response]:
    """A request on chat-a that stays in flight until the gate file exists."""
    task = asyncio.create_task(client.post(CHAT, json=chat("chat-a", max_tokens=1)))
    assert await wait_for(lambda: any(rt.leases for rt in h.runtimes.runtimes()), 20)
    return task


@dataclass
class Swap:
    """chat-a held in flight, chat-b asked for: the lane drains until `finish()`."""

    gate: Path
    events: list[dict[str, Any]]
    client: httpx.AsyncClient
    a: asyncio.Task[httpx.Response]
    b: asyncio.Task[httpx.Response]

    async def finish(self) -> None:
        self.gate.touch()
        assert (await self.a).status_code == 200
        assert (await self.b).status_code == 200


async def _swap(h: RouterHarness, readahead_on: bool = True, **memory: Any) -> Swap:
    gate, events = _setup(h)  # first: the settings carry chat-a's gate
    client = await _start(h, _settings(h, readahead_on, **memory), events)
    a = await _hold_a(h, client)
    b = asyncio.create_task(client.post(CHAT, json=chat("chat-b", max_tokens=1)))
    return Swap(gate, events, client, a, b)


def _readahead(events: list[dict[str, Any]], result: str | None = None) -> list[dict[str, Any]]:
    return [
        e for e in events if e["event"] == "readahead" and (result is None or e["result"] == result)
    ]


async def _captures(h: RouterHarness) -> dict[str, dict[str, Any]]:
    page = await h.app[STORE].load_attempts.page(CaptureFilter(limit=50))  # type: ignore[index]
    return {c["model"]: c for c in page["captures"]}


async def test_a_drain_reads_the_incoming_files_ahead_and_the_capture_says_so(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readahead, "CHUNK", CHUNK)
    swap = await _swap(harness)
    events = swap.events
    # chat-b waits for the drain of chat-a: its file is read ahead meanwhile, to the end.
    assert await wait_for(lambda: _readahead(events, "done"), 20), _readahead(events)
    started, done = _readahead(events)
    assert started["result"] == "started" and started["model"] == "chat-b"
    assert started["files"] == ["chat-b.gguf"] and started["planned"] == B_SIZE
    assert done["bytes"] == B_SIZE == done["total"]
    assert harness.runtimes.spawn_count == 1  # chat-b is not loading yet: the lane drains
    await swap.finish()
    captures = await _captures(harness)
    assert captures["chat-a"]["readahead"] is None  # loaded into an empty lane: no drain
    ahead = captures["chat-b"]["readahead"]
    assert ahead["done"] is True and ahead["result"] == "done"
    assert ahead["bytes"] == ahead["planned"] == ahead["total"] == B_SIZE
    assert ahead["capped"] is False and ahead["seconds"] >= 0
    assert captures["chat-b"]["duration_ms"] is not None  # the load time beside it
    # The same figures on the capture's detail route, as the WebUI reads them.
    attempt = captures["chat-b"]["id"]
    detail = (await swap.client.get(f"/router/v1/site/load-captures/{attempt}")).json()
    assert detail["readahead"] == ahead


async def test_an_abandoned_swap_cancels_its_read_ahead(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readahead, "CHUNK", CHUNK)
    entered, release = threading.Event(), threading.Event()
    real = readahead.read_chunk

    def held_chunk(path: Path, offset: int, buffer: bytearray, length: int, end: int) -> int:
        entered.set()
        release.wait(30)  # the first chunk is in flight until the test lets it finish
        return real(path, offset, buffer, length, end)

    monkeypatch.setattr(readahead, "read_chunk", held_chunk)
    gate, events = _setup(harness)
    try:
        client = await _start(harness, _settings(harness), events)
        a = await _hold_a(harness, client)
        b = asyncio.create_task(client.post(CHAT, json=chat("chat-b", max_tokens=1)))
        assert await wait_for(entered.is_set, 20)
        assert [e["result"] for e in _readahead(events)] == ["started"]
        b.cancel()  # the client gives up while it waits for the swap
        with pytest.raises(asyncio.CancelledError):
            await b
        assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 0, 20)
        release.set()
        assert await wait_for(lambda: _readahead(events, "cancelled"), 20), _readahead(events)
        (cancelled,) = _readahead(events, "cancelled")
        assert cancelled["bytes"] == CHUNK < B_SIZE  # the chunk in flight, then no more
    finally:
        release.set()
        gate.touch()
    assert (await a).status_code == 200
    assert harness.runtimes.spawn_count == 1  # chat-b never loaded


@dataclass(frozen=True)
class AboveChatA:
    """A host budget of what chat-a holds in the ledger (its estimate) plus `extra` bytes."""

    extra: int


async def _held_by_chat_a(h: RouterHarness) -> int:
    """chat-a's host bytes in the ledger, from a router started once to ask."""
    _setup(h)
    await h.start(_settings(h))
    spec = spec_for(h.app[CATALOG].require("chat-a"), Lane.TEXT)
    held = h.runtimes._book.estimate(spec).devices["host"]
    await h.close()
    return held


# chat-a is resident while it drains: the room is what the ledger leaves free of the host
# budget, and never beyond what is available less memory.reserve (router/memory/host.py).
@pytest.mark.parametrize(
    ("readahead_on", "memory", "results", "planned"),
    [
        (False, {}, [], None),
        (True, {"host_budget": 4, "reserve": 0}, ["skipped"], None),
        (True, {"host_budget": AboveChatA(1020), "reserve": 0}, ["started", "done"], 1020),
        # The whole of RAM as the budget, all of it reserved: nothing is available to read into.
        (True, {"host_budget": 1 << 50, "reserve": 1 << 50}, ["skipped"], None),
    ],
    ids=[
        "setting-off",
        "no-room-in-the-host-budget",
        "capped-to-the-host-budget",
        "no-room-beyond-the-reserve",
    ],
)
@pytest.mark.usefixtures("no_measurement")  # the ledger holds chat-a's estimate throughout
async def test_the_host_budget_caps_or_skips_it_and_the_setting_turns_it_off(
    harness: RouterHarness,
    readahead_on: bool,
    memory: dict[str, Any],
    results: list[str],
    planned: int | None,
) -> None:
    budget = memory.get("host_budget")
    if isinstance(budget, AboveChatA):
        memory = memory | {"host_budget": await _held_by_chat_a(harness) + budget.extra}
    swap = await _swap(harness, readahead_on, **memory)
    events = swap.events
    assert await wait_for(lambda: any(rt.draining for rt in harness.runtimes.runtimes()), 20)
    if planned is not None:  # finished before the load begins, so the capture says "done"
        assert await wait_for(lambda: _readahead(events, "done"), 20), _readahead(events)
    await swap.finish()
    assert [e["result"] for e in _readahead(events)] == results
    ahead = (await _captures(harness))["chat-b"]["readahead"]
    if not results:
        assert ahead is None  # nothing ran
    elif results == ["skipped"]:
        assert _readahead(events)[0]["reason"] == "no room"
        assert ahead["result"] == "skipped" and ahead["done"] is False
        assert ahead["bytes"] == ahead["planned"] == 0 and ahead["total"] == B_SIZE
    else:
        assert ahead["capped"] is True and ahead["done"] is True
        assert ahead["bytes"] == ahead["planned"] == planned < ahead["total"] == B_SIZE


async def test_a_failing_read_ahead_is_logged_counted_and_the_swap_goes_on(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_disk(path: Path, offset: int, buffer: bytearray, length: int, end: int) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(readahead, "read_chunk", broken_disk)
    swap = await _swap(harness)
    events = swap.events
    assert await wait_for(lambda: _readahead(events, "failed"), 20), _readahead(events)
    await swap.finish()  # the swap and both requests went on without it
    assert "Input/output error" in _readahead(events, "failed")[0]["reason"]
    assert any("read-ahead of chat-b failed" in r.getMessage() for r in caplog.records)
    metrics = (await swap.client.get("/metrics")).text
    assert 'tensor_router_readahead_total{result="failed"} 1.0' in metrics
    ahead = (await _captures(harness))["chat-b"]["readahead"]
    assert ahead["result"] == "failed" and ahead["done"] is False and ahead["bytes"] == 0


@pytest.mark.usefixtures("no_measurement")  # a measured figure would stand in for the estimate
async def test_the_host_room_reads_no_model_header_on_the_event_loop(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead asks the live ledger for host room on the event loop (router/memory/
    host.py). With one runtime per lane nothing estimated chat-a before; its estimate (a GGUF
    header read, up to a second for a large vocabulary) is read in a worker thread as its load
    begins, never on the loop at the swap."""
    on_loop: list[bool] = []
    real = residency.estimate_config

    def recording(*args: Any) -> Any:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return real(*args)

    monkeypatch.setattr(residency, "estimate_config", recording)
    swap = await _swap(harness)
    assert await wait_for(lambda: _readahead(swap.events, "done"), 20), _readahead(swap.events)
    await swap.finish()
    assert on_loop and not any(on_loop), on_loop
