"""Issue 26: `queue_position` events (docs/events.md): coalesced, only when positions change."""

from __future__ import annotations

import asyncio
from typing import Any

from router.runtime.activity import ActivityReporter
from router.runtime.board import _positions_only
from tests.records.test_event_contents import collect
from tests.support.harness import RouterHarness, chat


def _queue(waiting: float, eta: float | None) -> dict[str, Any]:
    row = {"model": "m", "position": 1, "waiting_s": waiting, "eta_s": eta}
    return {"queue": {"text": [row]}}


async def test_a_growing_wait_alone_sends_nothing_new() -> None:
    sent: list[dict[str, Any]] = []
    now = [_queue(1.0, 5.0)]
    reporter = ActivityReporter(
        lambda kind, **f: sent.append({"event": kind, **f}),
        lambda: now[0],
        delay=0.01,
        event="queue_position",
        same=_positions_only,
    )
    for _ in range(50):
        reporter.poke()  # a busy queue: one event per delay at most
    await asyncio.sleep(0.1)
    now[0] = _queue(2.0, 5.0)  # only waiting_s moved
    reporter.poke()
    await asyncio.sleep(0.1)
    now[0] = _queue(2.5, None)  # the ETA changed
    reporter.poke()
    await asyncio.sleep(0.1)
    assert [(e["event"], e["queue"]["text"][0]["eta_s"]) for e in sent] == [
        ("queue_position", 5.0),
        ("queue_position", None),
    ]


async def test_a_request_behind_a_load_is_announced_then_leaves_the_queue(
    harness: RouterHarness,
) -> None:
    harness.model("slow")
    harness.faults["llamacpp"] = "--startup-delay 1.5"
    client = await harness.start(harness.settings())

    async def request() -> None:
        response = await client.post("/v1/chat/completions", json=chat("slow"), timeout=60)
        assert response.status_code == 200

    def done(events: list[dict[str, Any]]) -> bool:
        positions = [e for e in events if e["event"] == "queue_position"]
        return len(positions) >= 2 and positions[-1]["queue"]["text"] == []

    events = await collect(client, request, done)
    positions = [e["queue"]["text"] for e in events if e["event"] == "queue_position"]
    first = positions[0]
    assert [(r["model"], r["position"]) for r in first] == [("slow", 1)]
    assert first[0]["eta_s"] is None  # never loaded before: no figure, no number
    assert positions[-1] == []
    assert len(positions) <= 4  # coalesced: not one per pump
