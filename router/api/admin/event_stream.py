"""`GET /router/v1/events`: the event bus as server-sent events (docs/events.md).

The subscription is opened before anything is written, so no event published while the
snapshot goes out is lost. The stream starts with a `hello` (the current event id), one
`state` event per runtime, and a `resync` first of all when the client's `Last-Event-ID` names
events this router cannot replay (it keeps no history). Every event carries `id:`; a comment
line goes out whenever nothing else did for `ui.events_heartbeat` (15 s), so proxies and
browsers keep the connection and a dead one is noticed. A client that reads too slowly loses
its backlog and gets `resync` (router/records/events.py); a write that waits longer than four
heartbeats ends the stream, so a stalled client cannot hold a handler forever.
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from router.appkeys import EVENTS, INFLIGHT, RUNTIMES, SETTINGS, STORE
from router.edge import SSE_HEADERS
from router.edge.inflight import ended_at_deadline
from router.records import EventBus
from router.records.events import Event, Subscription, resync_event

HEADERS = SSE_HEADERS
HEARTBEAT = b": heartbeat\n\n"
RETRY_MS = 2000  # the browser's first reconnect delay (the UI backs off further itself)


def encode(event: Event) -> bytes:
    """One SSE frame: `id:`, `event:`, one `data:` line of JSON (JSON has no raw newline)."""
    kind = str(event.get("event", "message"))
    data = json.dumps(event, default=str, separators=(",", ":"))
    return f"id: {event.get('id', 0)}\nevent: {kind}\ndata: {data}\n\n".encode()


def last_event_id(request: web.Request) -> int | None:
    """The client's `Last-Event-ID` (an EventSource resends it on reconnect), if a number."""
    raw = request.headers.get("Last-Event-ID", "").strip()
    return int(raw) if raw.isdigit() and len(raw) < 20 else (-1 if raw else None)


def opening(request: web.Request, bus: EventBus) -> list[Event]:
    """What a new stream starts with; pure apart from reading the runtime snapshot."""
    now_id = bus.last_id
    events: list[Event] = []
    seen = last_event_id(request)
    if seen is not None and seen != now_id:
        # Events in between are gone (or the router restarted and ids began again).
        events.append(resync_event(now_id, "events since Last-Event-ID cannot be replayed"))
    node = request.app[SETTINGS].cluster.node_id
    now = time.time()
    hello = {"event": "hello", "id": now_id, "time": now, "node_id": node, "retry_ms": RETRY_MS}
    store = request.app.get(STORE)
    if store is not None and store.incidents:  # the WebUI keeps the banner across reloads
        hello["store_incidents"] = list(store.incidents)
    events.append(hello)
    for runtime in request.app[RUNTIMES].snapshot():
        events.append({"event": "state", "id": now_id, "time": now, **runtime})
    return events


async def _write(response: web.StreamResponse, data: bytes, deadline: float) -> None:
    await asyncio.wait_for(response.write(data), deadline)


async def stream(request: web.Request) -> web.StreamResponse:
    if request.method == "HEAD":  # headers only: there is no body to wait for
        return web.Response(headers=HEADERS)
    bus = request.app[EVENTS]
    response = web.StreamResponse(headers=HEADERS)
    async with bus.subscribe() as subscription:
        await response.prepare(request)
        try:
            # At the graceful stop's deadline the stream ends with an error event (R27).
            async with ended_at_deadline(request.app[INFLIGHT], response):
                await _follow(request, response, subscription, bus)
        except TimeoutError:
            # A client that has not taken a byte for four heartbeats: give its slot back.
            if request.transport is not None:
                request.transport.close()
    return response


async def _follow(
    request: web.Request, response: web.StreamResponse, subscription: Subscription, bus: EventBus
) -> None:
    heartbeat = request.app[SETTINGS].ui.events_heartbeat
    deadline = heartbeat * 4
    await _write(response, f"retry: {RETRY_MS}\n\n".encode(), deadline)
    for event in opening(request, bus):
        await _write(response, encode(event), deadline)
    while True:
        try:
            event = await asyncio.wait_for(subscription.get(), heartbeat)
        except TimeoutError:
            await _write(response, HEARTBEAT, deadline)
            continue
        await _write(response, encode(event), deadline)
