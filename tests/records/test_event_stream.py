"""`/router/v1/events` and the bus behind it: ids, heartbeat, the opening snapshot,
`Last-Event-ID`, and a slow subscriber that is told to resync while the others go on
(router/records/events.py, router/api/admin/event_stream.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from router.appkeys import EVENTS
from router.config import Settings
from router.records import EventBus
from tests.support.harness import RouterHarness, wait_for


def settings(h: RouterHarness, **ui: Any) -> Settings:
    data = h.settings().model_dump()
    data["ui"] = {**data["ui"], **ui}
    return Settings.model_validate(data)


class Frames:
    """Reads an SSE body frame by frame (comments kept: the heartbeat is one)."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = {}
        async for line in self._lines:
            if line == "":
                if frame:
                    return frame
                continue
            field, _, value = line.partition(":")
            frame.setdefault(field or "comment", value.strip())
        raise AssertionError("the stream ended")

    async def next_event(self) -> dict[str, Any]:
        while "event" not in (frame := await asyncio.wait_for(self.next(), 10)):
            pass
        return {**frame, "data": json.loads(frame["data"]), "id": int(frame["id"])}


# --- the bus, without sockets ---------------------------------------------------------------


async def test_ids_increase_by_one_per_event() -> None:
    bus = EventBus()
    async with bus.subscribe() as sub:
        published = [bus.publish("ping", n=n)["id"] for n in range(5)]
        received = [(await sub.get())["id"] for _ in range(5)]
    assert published == received == list(range(1, 6))
    assert bus.last_id == 5


async def test_a_full_queue_resyncs_the_slow_subscriber_only() -> None:
    bus = EventBus(queue_size=8)
    fast_seen: list[int] = []

    async def fast(sub: Any) -> None:
        while len(fast_seen) < 100:
            fast_seen.append((await sub.get())["id"])

    async with bus.subscribe() as fast_sub, bus.subscribe() as slow_sub:
        reader = asyncio.create_task(fast(fast_sub))
        for n in range(100):
            bus.publish("ping", n=n)  # never awaits, whoever is behind
            await asyncio.sleep(0)  # the fast reader's turn
        await asyncio.wait_for(reader, 5)
        backlog = [slow_sub.get_nowait() for _ in range(slow_sub.qsize())]
    assert fast_seen == list(range(1, 101)) and fast_sub.resyncs == 0
    assert slow_sub.resyncs >= 1 and len(backlog) <= 8
    kinds = [e["event"] for e in backlog]
    assert "resync" in kinds
    resync = backlog[kinds.index("resync")]
    after = [e["id"] for e in backlog[kinds.index("resync") + 1 :]]
    assert after == sorted(after) and all(i > resync["id"] for i in after)
    assert backlog[-1]["id"] == 100  # the newest events are kept after the resync


async def test_enrichers_add_fields_before_anyone_sees_the_event() -> None:
    bus = EventBus()
    seen: list[dict[str, Any]] = []
    bus.add_enricher(lambda e: {"extra": 1} if e["event"] == "loading" else None)
    bus.subscribe_callback(seen.append)
    bus.publish("loading")
    bus.publish("ready")
    assert seen[0]["extra"] == 1 and "extra" not in seen[1]


# --- over HTTP ------------------------------------------------------------------------------


async def test_stream_opens_with_hello_and_carries_ids(harness: RouterHarness) -> None:
    client = await harness.start(settings(harness))
    bus = harness.app[EVENTS]  # type: ignore[index]
    bus.publish("before_connect")
    async with client.stream("GET", "/router/v1/events") as response:
        assert response.headers["x-accel-buffering"] == "no"
        frames = Frames(response)
        hello = await frames.next_event()
        assert hello["event"] == "hello" and hello["id"] == 1
        assert hello["data"]["node_id"] == "local" and hello["data"]["time"] > 0
        assert await wait_for(lambda: bus.subscribers == 1)
        for n in range(3):
            bus.publish("ping", n=n)
        pings = [await frames.next_event() for _ in range(3)]
    assert [p["id"] for p in pings] == [2, 3, 4]
    assert [p["data"]["n"] for p in pings] == [0, 1, 2]
    assert all(p["event"] == "ping" and p["data"]["id"] == p["id"] for p in pings)


async def test_heartbeat_when_nothing_happens(harness: RouterHarness) -> None:
    client = await harness.start(settings(harness, events_heartbeat=0.2))
    async with client.stream("GET", "/router/v1/events") as response:
        frames = Frames(response)
        await frames.next_event()  # hello
        beats = [await asyncio.wait_for(frames.next(), 10) for _ in range(2)]
    assert beats == [{"comment": "heartbeat"}] * 2


async def test_last_event_id_that_cannot_be_replayed_gets_resync(
    harness: RouterHarness,
) -> None:
    client = await harness.start(settings(harness))
    bus = harness.app[EVENTS]  # type: ignore[index]
    for _ in range(4):
        bus.publish("ping")
    for stale in ("2", "99", "garbage"):
        headers = {"Last-Event-ID": stale}
        async with client.stream("GET", "/router/v1/events", headers=headers) as response:
            first = await Frames(response).next_event()
        assert first["event"] == "resync" and first["id"] == 4, stale
    async with client.stream(
        "GET", "/router/v1/events", headers={"Last-Event-ID": "4"}
    ) as response:
        assert (await Frames(response).next_event())["event"] == "hello"  # nothing missed


async def test_a_burst_beyond_the_queue_reaches_the_client_as_resync(
    harness: RouterHarness,
) -> None:
    client = await harness.start(settings(harness, events_queue=8))
    bus = harness.app[EVENTS]  # type: ignore[index]
    async with client.stream("GET", "/router/v1/events") as response:
        frames = Frames(response)
        await frames.next_event()  # hello
        assert await wait_for(lambda: bus.subscribers == 1)
        for n in range(50):  # in one go: the handler cannot write in between
            bus.publish("ping", n=n)
        first = await frames.next_event()
        rest = [await frames.next_event() for _ in range(7)]
    assert first["event"] == "resync"
    assert [e["data"]["n"] for e in rest] == list(range(43, 50))


async def test_head_answers_at_once(harness: RouterHarness) -> None:
    client = await harness.start(settings(harness))
    response = await asyncio.wait_for(client.head("/router/v1/events"), 10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    # Nothing stays subscribed behind a HEAD (the keep-alive connection is still open).
    assert harness.app[EVENTS].subscribers == 0  # type: ignore[index]
    assert (await client.get("/health")).status_code == 200  # and it still serves


async def test_a_client_that_stops_reading_does_not_hold_up_another(
    harness: RouterHarness,
) -> None:
    """Real sockets: one stream is not read at all while 25 MB of events go out; the other
    gets every event at once, the stalled one finds `resync` when it reads again."""
    client = await harness.start(settings(harness, events_queue=8))
    bus = harness.app[EVENTS]  # type: ignore[index]
    other = httpx.AsyncClient(base_url=client.base_url, timeout=30)
    payload = "x" * 256 * 1024
    try:
        async with (
            client.stream("GET", "/router/v1/events") as stalled,
            other.stream("GET", "/router/v1/events") as reading,
        ):
            slow, fast = Frames(stalled), Frames(reading)
            await slow.next_event()
            await fast.next_event()
            assert await wait_for(lambda: bus.subscribers == 2)
            for n in range(100):
                bus.publish("big", n=n, payload=payload)
                got = await fast.next_event()  # the reader keeps up, event by event
                assert got["data"]["n"] == n
            kinds = []
            while "resync" not in kinds and len(kinds) < 200:
                kinds.append((await slow.next_event())["event"])
            assert "resync" in kinds
    finally:
        await other.aclose()
