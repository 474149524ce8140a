"""One analytics event per request: built here, fed to metrics and (when present) the store.

No prompt or response content is ever stored: the response's last bytes travel to the store's
writer process only to read the backend's own usage report there (store/analytics.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from router.errors import sanitize
from router.records.metrics import Metrics
from router.store.rows import Raw, sniff_usage


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
    key_name: str | None = None  # the scoped key that sent it (never its secret)
    trace_id: str | None = None  # its trace, when traces are on (docs/observability.md)


class Recorder:
    def __init__(self, metrics: Metrics, node_id: str, secrets: tuple[str, ...] = ()) -> None:
        self._metrics = metrics
        self._node_id = node_id
        self._secrets = secrets
        self.sink: EventSink | None = None
        # Told the tokens each scoped key's request used (key name, tokens, wall time): the
        # key book counts them against the key's daily quota.
        self.on_tokens: Callable[[str, int, float], None] | None = None

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
        self._observe(info, status, duration, ttfb_ms, aborted, tail)
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
                    info.key_name,
                    info.trace_id,
                )
            )

    def relayed(self, info: RequestInfo, status: int, aborted: bool, tail: bytes) -> None:
        """A scoped key's request another node answered (and recorded): counted for the key
        here, where its quota is kept."""
        if info.key_name:
            self._by_key(info, info.key_name, status, aborted, tail)

    def _observe(
        self,
        info: RequestInfo,
        status: int,
        duration: float,
        ttfb_ms: float | None,
        aborted: bool,
        tail: bytes,
    ) -> None:
        """The request's Prometheus series: per route and lane, per model, per scoped key."""
        lane = info.lane or "none"
        ttfb = ttfb_ms / 1000.0 if ttfb_ms is not None else None
        queue_wait = info.queue_wait_ms / 1000.0
        self._metrics.observe_request(info.route, lane, status, duration, ttfb, queue_wait)
        if info.model and tail:
            self._metrics.tokens.note(info.model, lane, tail)
        if info.key_name:
            self._by_key(info, info.key_name, status, aborted, tail)

    def _by_key(self, info: RequestInfo, key: str, status: int, aborted: bool, tail: bytes) -> None:
        """A scoped key's request: its series, and its tokens for the quota. The usage report
        is read here, not only in the writer, because the quota must see it at once."""
        tokens = sniff_usage(tail).get("total_tokens", 0)
        self._metrics.keys.observe(key, status, aborted, tokens, info.queue_wait_ms / 1000.0)
        if self.on_tokens is not None:
            self.on_tokens(key, tokens, time.time())
