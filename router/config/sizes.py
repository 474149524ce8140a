"""Memory sizes in settings: bytes, `600MiB`, `1.5GiB`, or `auto` (docs/configuration.md).

Binary units only (KiB, MiB, GiB, TiB; the bare `K`/`M`/`G` spellings read the same way): memory
is counted in powers of two by every tool an operator compares with (`free -m`, nvidia-smi,
llama-server's own `[MiB]` report). Lives in the config layer because the settings schema needs
it; router/memory re-exports it.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(?:i?b)?|(b))?", re.ASCII | re.IGNORECASE)
_HELP = "use a number of bytes or a size like 600MiB, 1.5GiB, 512KiB"


def parse_size(value: Any) -> int:
    """`600MiB`, `1GiB`, `1.5 GiB`, `2048`, an int -> bytes. ValueError for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"bad size {value!r}: {_HELP}")
    if isinstance(value, str):
        match = _SIZE.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"bad size {value!r}: {_HELP}")
        unit = (match.group(2) or match.group(3) or "").lower()
        number = float(match.group(1)) * _UNITS[unit]
    else:
        number = float(value)
    if not math.isfinite(number) or number < 0 or number >= 1 << 62:
        raise ValueError(f"bad size {value!r}: must be finite, not negative and below 4 EiB")
    return int(number)


def parse_size_or_auto(value: Any) -> int | Literal["auto"]:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return parse_size(value)


def format_size(size: int) -> str:
    """The shortest exact-enough spelling for messages: `1.5 GiB`, `600 MiB`, `512 B`."""
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.4g} {unit}"
    return f"{size} B"


Size = Annotated[int, BeforeValidator(parse_size)]
SizeOrAuto = Annotated[int | Literal["auto"], BeforeValidator(parse_size_or_auto)]

__all__ = ["Size", "SizeOrAuto", "format_size", "parse_size", "parse_size_or_auto"]
