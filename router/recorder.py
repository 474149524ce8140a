"""One analytics event per request: built here, fed to metrics and (when present) the store.

No prompt or response content is ever part of an event; token counts are read from the
backend's own usage report in the last bytes of the response.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from router.errors import sanitize
from router.metrics import Metrics

_COUNTS = {
    "prompt_tokens": re.compile(rb'"(?:prompt_tokens|prompt_eval_count|input_tokens)"\s*:\s*(\d+)'),
    "completion_tokens": re.compile(
        rb'"(?:completion_tokens|eval_count|output_tokens)"\s*:\s*(\d+)'
    ),
    "total_tokens": re.compile(rb'"total_tokens"\s*:\s*(\d+)'),
}


class EventSink(Protocol):
    def record(self, event: dict[str, Any]) -> None: ...


def sniff_usage(tail: bytes) -> dict[str, int]:
    """Token counts from the last usage report in the response's final bytes."""
    found: dict[str, int] = {}
    for name, pattern in _COUNTS.items():
        matches = pattern.findall(tail)
        if matches:
            found[name] = int(matches[-1])
    if "total_tokens" not in found and found:
        found["total_tokens"] = found.get("prompt_tokens", 0) + found.get("completion_tokens", 0)
    return found


@dataclass
class RequestInfo:
    route: str
    surface: str
    lane: str | None
    started: float  # time.monotonic() at arrival
    wall: float  # time.time() at arrival
    model: str | None = None
    family: str | None = None
    queue_wait_ms: float = 0.0


class Recorder:
    def __init__(self, metrics: Metrics, node_id: str, secrets: tuple[str, ...] = ()) -> None:
        self._metrics = metrics
        self._node_id = node_id
        self._secrets = secrets
        self.sink: EventSink | None = None

    def record(
        self,
        info: RequestInfo,
        *,
        status: int,
        upstream_status: int | None = None,
        error_message: str | None = None,
        ttfb_ms: float | None = None,
        bytes_in: int = 0,
        bytes_out: int = 0,
        aborted: bool = False,
        tail: bytes = b"",
    ) -> dict[str, Any]:
        duration = time.monotonic() - info.started
        event: dict[str, Any] = {
            "time": info.wall,
            "route": info.route,
            "surface": info.surface,
            "lane": info.lane,
            "model": info.model,
            "node_id": self._node_id,
            "backend": info.family,
            "status": status,
            "upstream_status": upstream_status,
            "error_message": sanitize(error_message, self._secrets) if error_message else None,
            "queue_wait_ms": round(info.queue_wait_ms, 3),
            "ttfb_ms": round(ttfb_ms, 3) if ttfb_ms is not None else None,
            "duration_ms": round(duration * 1000.0, 3),
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "aborted": aborted,
            **sniff_usage(tail),
        }
        self._metrics.observe_request(
            info.route,
            info.lane or "none",
            status,
            duration,
            ttfb_ms / 1000.0 if ttfb_ms is not None else None,
            info.queue_wait_ms / 1000.0,
        )
        if self.sink is not None:
            self.sink.record(event)
        return event
