"""Issue 25: with `runtime.residency: memory` admission awaits each configuration's estimate
(off the event loop) before queueing; requests still enter the queue in the order they arrived
(router/runtime/arrival.py). In-process: the manager's own `ensure()`, the estimate of one
configuration held at the `estimate_config` seam until the other's is done."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from router.appkeys import CATALOG
from router.domain import Lane
from router.runtime import arrival, holdings
from router.runtime.queues import Ticket
from tests.support.harness import RouterHarness
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("no_measurement")


async def test_first_requests_for_unestimated_configs_queue_in_arrival_order(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    for model in ("chat-a", "chat-b"):
        h.model(model)
        h.faults_for_model[model] = "--startup-delay 30"  # loading: the requests stay queued
    gate, b_done = threading.Event(), threading.Event()
    real = holdings.estimate_config

    def slow_for_a(config: Any, *args: Any) -> Any:  # runs in a worker thread
        if config.id == "chat-a":
            assert gate.wait(20), "the test never opened the gate"
        found = real(config, *args)
        if config.id == "chat-b":
            b_done.set()
        return found

    monkeypatch.setattr(holdings, "estimate_config", slow_for_a)
    await h.start(h.settings(residency="memory", queue_timeout=60))
    assert h.app is not None
    catalog, manager = h.app[CATALOG], h.runtimes
    arrivals = ["chat-a", "chat-b", "chat-a", "chat-b"]
    all_queued, add = asyncio.Event(), manager._queues.add

    def counted(entry: Any) -> None:
        add(entry)
        if len(manager._queues.entries(Lane.TEXT)) >= len(arrivals):
            all_queued.set()

    monkeypatch.setattr(manager._queues, "add", counted)
    b_waiting, waiting, turn_wait = asyncio.Event(), [], arrival.Turn.wait

    async def noted_wait(turn: arrival.Turn) -> None:  # the chat-b requests reach their turn
        waiting.append(turn)
        if len(waiting) == 2:
            b_waiting.set()
        await turn_wait(turn)

    monkeypatch.setattr(arrival.Turn, "wait", noted_wait)
    tickets = [Ticket() for _ in arrivals]
    tasks = []
    for model, ticket in zip(arrivals, tickets, strict=True):
        config = catalog.require(model)
        tasks.append(asyncio.create_task(manager.ensure(config, Lane.TEXT, ticket=ticket)))
        await asyncio.sleep(0)  # it has arrived (reached admission) before the next one
    try:
        assert await asyncio.to_thread(b_done.wait, 20)  # chat-b is estimated, chat-a is not
        async with asyncio.timeout(20):
            await b_waiting.wait()  # both chat-b requests are past their estimate
        for _ in range(10):  # turns of the loop: a chat-b request could overtake now (it must not)
            await asyncio.sleep(0)
        assert manager._queues.entries(Lane.TEXT) == []
        gate.set()
        async with asyncio.timeout(20):
            await all_queued.wait()
        queued = manager._queues.entries(Lane.TEXT)
        order = [next(i for i, t in enumerate(tickets) if t.waiter is e) for e in queued]
        assert order == [0, 1, 2, 3], [arrivals[i] for i in order]
        assert [e.spec.config.id for e in queued] == arrivals
        status = manager.queue_status()["text"]
        assert len(status) == len(arrivals)
    finally:
        gate.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
