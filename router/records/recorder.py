"""One analytics event per request: built here, fed to metrics and (when present) the store.

No prompt or response content is ever stored: the response's last bytes travel to the store's
writer process only to read the backend's own usage report there (store/analytics.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from router.errors import sanitize
from router.records.metrics import Metrics
from router.store.rows import Raw


class EventSink(Protocol):
    def record_raw(self, raw: Raw) -> None: ...


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
    answered_by: str | None = None  # the guardian model that answered for `model`
    trace_id: str | None = None  # its trace, when traces are on (docs/observability.md)


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
    ) -> None:
        duration = time.monotonic() - info.started
        self._metrics.observe_request(
            info.route,
            info.lane or "none",
            status,
            duration,
            ttfb_ms / 1000.0 if ttfb_ms is not None else None,
            info.queue_wait_ms / 1000.0,
        )
        sink = self.sink
        if sink is not None:
            # Handed over as the proxy has the values; rounding and usage parsing happen in the
            # writer process (store/analytics.row_from_raw), not on the event loop.
            sink.record_raw(
                (
                    info.wall,
                    info.route,
                    info.surface,
                    info.lane,
                    info.model,
                    self._node_id,
                    info.family,
                    status,
                    upstream_status,
                    sanitize(error_message, self._secrets) if error_message else None,
                    info.queue_wait_ms,
                    ttfb_ms,
                    duration,
                    bytes_in,
                    bytes_out,
                    aborted,
                    tail,
                    info.answered_by,
                    info.trace_id,
                )
            )
