"""Analytics events from outside callers: normalisation of a loose mapping into a row.

`normalize_event` keeps only the known keys, so a caller that passes a prompt or a response by
mistake stores nothing of it. The router's own per-request records take the faster path in
rows.py; the summary lives in summary.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from router.errors import sanitize
from router.store.rows import (
    CLIENT_CLOSED,
    COLUMNS,
    INT_COLUMNS,
    MILLIS_COLUMNS,
    TEXT_COLUMNS,
    TOKEN_COLUMNS,
    Row,
)

MAX_TEXT = 512  # a route template or model ID longer than this is not a real one


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
    values: dict[str, Any] = {name: as_text(event.get(name)) for name in TEXT_COLUMNS}
    values["route"] = values["route"] or ""
    values["node_id"] = values["node_id"] or node_id
    for name in (*INT_COLUMNS, *TOKEN_COLUMNS):
        values[name] = as_int(event.get(name))
    values["status"] = values["status"] or 0
    for name in MILLIS_COLUMNS:
        values[name] = as_float(event.get(name))
    values["time"] = as_float(event.get("time")) or time.time()
    message = event.get("error_message")
    values["error_message"] = None if message is None else sanitize(str(message))
    values["aborted"] = 1 if event.get("aborted") or values["status"] == CLIENT_CLOSED else 0
    return tuple(values[name] for name in COLUMNS)
