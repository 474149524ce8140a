"""Analytics events: the fixed column set, cheap normalisation, and the summary maths.

`normalize_event` keeps only the known keys, so a caller that passes a prompt or a response by
mistake stores nothing of it. The summary lives in summary.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from router.errors import sanitize

_TEXT = ("route", "surface", "lane", "model", "node_id", "backend")
_INTS = ("status", "upstream_status", "bytes_in", "bytes_out")
_TOKENS = ("prompt_tokens", "completion_tokens", "total_tokens")
_MILLIS = ("queue_wait_ms", "ttfb_ms", "duration_ms")
COLUMNS = (
    "time",
    *_TEXT,
    "status",
    "upstream_status",
    "error_message",
    *_MILLIS,
    "bytes_in",
    "bytes_out",
    "aborted",
    *_TOKENS,
)
INSERT_EVENT = (
    f"INSERT INTO analytics_events ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)
MAX_TEXT = 512  # a route template or model ID longer than this is not a real one
CLIENT_CLOSED = 499

Row = tuple[Any, ...]


def as_int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def as_float(value: Any) -> float | None:
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


def as_text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT]


def normalize_event(event: Mapping[str, Any], node_id: str) -> Row:
    """One insert row; never raises, so a bad field cannot fail the request that recorded it."""
    values: dict[str, Any] = {name: as_text(event.get(name)) for name in _TEXT}
    values["route"] = values["route"] or ""
    values["node_id"] = values["node_id"] or node_id
    for name in (*_INTS, *_TOKENS):
        values[name] = as_int(event.get(name))
    values["status"] = values["status"] or 0
    for name in _MILLIS:
        values[name] = as_float(event.get(name))
    values["time"] = as_float(event.get("time")) or time.time()
    message = event.get("error_message")
    values["error_message"] = None if message is None else sanitize(str(message))
    values["aborted"] = 1 if event.get("aborted") or values["status"] == CLIENT_CLOSED else 0
    return tuple(values[name] for name in COLUMNS)
