"""What the router tells about itself: one analytics event per request, Prometheus metrics,
and the event bus behind /router/v1/events.
"""

from __future__ import annotations

from router.records.events import EventBus
from router.records.metrics import Metrics
from router.records.recorder import Recorder, RequestInfo

__all__ = [
    "EventBus",
    "Metrics",
    "Recorder",
    "RequestInfo",
]
