"""Lenient field conversion for records that arrive as loose mappings (load errors): a bad
value becomes None instead of failing the caller. Per-request rows are built in rows.py; the
summary lives in summary.py.
"""

from __future__ import annotations

import math
from typing import Any

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
