"""Ollama's `keep_alive`: how long a model stays loaded once this request is answered.

Ollama reads it as a Go `time.Duration` (api/types.go `Duration.UnmarshalJSON`): a JSON number
is seconds, a string is Go's duration syntax (`"5m"`, `"1h30m"`, `"1.5s"`, `"0"`), and any
negative value means "keep until unloaded". Pure: the runtime manager applies the result.
"""

from __future__ import annotations

import math
import re
from typing import Any

from router.errors import BadRequest

# Go's time.ParseDuration units, in seconds.
_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_WHOLE = re.compile(r"(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")

FOREVER = math.inf


def parse_keep_alive(value: Any) -> float | None:
    """Seconds to stay loaded after the answer (`math.inf`: until unloaded), or None when the
    request does not say (the runtime keeps what it had). Refuses what Ollama refuses."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _refused()
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise _refused()
        return FOREVER if value < 0 else float(value)
    if isinstance(value, str):
        return _go_duration(value.strip())
    raise _refused()


def _go_duration(text: str) -> float:
    sign, rest = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text.removeprefix("+"))
    if rest == "0":
        return 0.0
    if not rest or not _WHOLE.fullmatch(rest):
        raise _refused()
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(rest))
    return FOREVER if sign < 0 and seconds > 0 else seconds


def _refused() -> BadRequest:
    return BadRequest(
        'keep_alive must be a duration such as "5m" or "1h30m", or a number of seconds '
        "(0 unloads after the answer, negative keeps the model loaded)",
        param="keep_alive",
    )
