"""Durations in settings: seconds, or `250ms`, `30s`, `10m`, `2h`, `1d`, `1h30m`
(docs/configuration.md). The WebUI's Lending page reads the same syntax (router/ui/lib/lending.js).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_BARE_NUMBER = re.compile(_NUMBER, re.ASCII)
_DURATION_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)\s*", re.ASCII)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HELP = "use a number of seconds or a string like 250ms, 30s, 10m, 2h, 1d, 1h30m"


def parse_duration(value: Any) -> float:
    """`30s`, `10m`, `1.5h`, `250ms`, `1h30m`, a bare number of seconds -> seconds as float.

    Raises ValueError (and nothing else) for anything that is not a finite, non-negative duration.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"bad duration {value!r}: {_DURATION_HELP}")
    if isinstance(value, str):
        seconds = _parse_duration_text(value.strip())
    else:
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError(f"duration {value!r} is too large") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"bad duration {value!r}: must be finite and not negative")
    return seconds


def _parse_duration_text(text: str) -> float:
    if _BARE_NUMBER.fullmatch(text):
        return float(text)
    total, pos = 0.0, 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise ValueError(f"bad duration {text!r}: {_DURATION_HELP}")
    return total


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]

__all__ = ["Duration", "PositiveDuration", "parse_duration"]
