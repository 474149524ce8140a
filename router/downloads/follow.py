"""The client side of `jobs/{id}/events` for `tensor-router download`: reads the server-sent
events of one job until it ends, reconnecting with Last-Event-ID when the stream drops."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

BASE = "/router/v1/site/download"
ENDS = frozenset({"completed", "failed", "cancelled", "paused"})
RECONNECTS = 30


def parse_sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event id, data) per event; comments and fields other than id/data are skipped."""
    event_id, data = "", ""
    for line in lines:
        if not line:
            if data:
                yield event_id, json.loads(data)
            event_id, data = "", ""
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()


def follow(client: httpx.Client, job_id: str, on_event: Callable[[dict[str, Any]], None]) -> str:
    """Feed every event to `on_event`; returns the state the job ended (or paused) in."""
    last, attempts = "0", 0
    while True:
        try:
            headers = {"Last-Event-ID": last}
            with client.stream("GET", f"{BASE}/jobs/{job_id}/events", headers=headers) as r:
                if r.status_code != 200:
                    raise httpx.HTTPStatusError(
                        f"events answered {r.status_code}", request=r.request, response=r
                    )
                for event_id, event in parse_sse(r.iter_lines()):
                    last = event_id or last
                    on_event(event)
                    if event.get("event") == "state" and event.get("state") in ENDS:
                        return str(event["state"])
        except (httpx.TransportError, ValueError):
            pass
        attempts += 1
        if attempts > RECONNECTS:
            raise httpx.ReadError("the event stream kept dropping")
        time.sleep(1.0)
