"""A model's Ollama metadata (`details`, `model_info`, `capabilities`, `expires_at`) from its
GGUF header, as `router/site/gguf_headers.py` `read_gguf_header` reads it. Pure: the header is
read off the event loop and cached per file (router/site/gguf_headers.py).

Ollama's own rules (server/images.go, format/format.go): `family` is `general.architecture`,
`parameter_size` is the parameter count in its `HumanNumber` form ("8.0B", "135.00M"),
`quantization_level` is the file type's name ("Q4_K_M", "F16").
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

# Ollama's answer for a model kept until unloaded: now + the largest Go duration (~292 years).
_FOREVER_S = (2**63 - 1) / 1e9


def details(header: Mapping[str, Any] | None, fmt: str) -> dict[str, Any]:
    """Ollama's `details`: blank (as before) when the file has no readable GGUF header."""
    out: dict[str, Any] = {
        "parent_model": "",
        "format": fmt,
        "family": "",
        "families": None,
        "parameter_size": "",
        "quantization_level": "",
    }
    if not header:
        return out
    family = header.get("architecture") or ""
    count = header.get("model_info", {}).get("general.parameter_count")
    out["family"] = family
    out["families"] = [family] if family else None
    out["parameter_size"] = human_number(count) if isinstance(count, int) and count > 0 else ""
    out["quantization_level"] = quantization(header.get("file_type"))
    return out


def model_info(header: Mapping[str, Any] | None, basename: str) -> dict[str, Any]:
    """`general.*` and `<arch>.*` scalars of the header; `general.basename` at least."""
    info = dict(header.get("model_info", {})) if header else {}
    info.setdefault("general.basename", basename)
    return dict(sorted(info.items()))


def capabilities(
    header: Mapping[str, Any] | None, *, text: bool, embedding: bool, projector: bool
) -> list[str]:
    """What the model does, in Ollama's words: completion, tools, vision, embedding."""
    out: list[str] = []
    if text:
        out.append("completion")
        if header and header.get("tools"):
            out.append("tools")
        if projector:
            out.append("vision")
    if embedding:
        out.append("embedding")
    return out


def context_length(configured: int | None, header: Mapping[str, Any] | None) -> int | None:
    """The context the runtime runs with: the configuration's, else the model's own."""
    if configured:
        return configured
    if not header:
        return None
    arch = header.get("architecture")
    value = header.get("model_info", {}).get(f"{arch}.context_length")
    return value if isinstance(value, int) and value > 0 else None


def expires_at(keep_alive: float, idle_deadline: float | None, now: float) -> str:
    """When a loaded model unloads: its idle deadline; while it works, now + its keep_alive;
    kept until unloaded, Ollama's far future."""
    if idle_deadline is not None:
        at = idle_deadline
    elif math.isinf(keep_alive):
        at = now + _FOREVER_S
    else:
        at = now + keep_alive
    return rfc3339(at)


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def human_number(n: int) -> str:
    """Go's format.HumanNumber: 8030261248 -> "8.0B", 135000000 -> "135M", 1500 -> "2K"."""
    for scale, unit, decimals in ((1e9, "B", 1), (1e6, "M", 2), (1e3, "K", 0)):
        if n >= scale:
            value = n / scale
            if value == math.floor(value):
                return f"{value:.0f}{unit}"
            return f"{value:.{decimals}f}{unit}"
    return str(n)


def quantization(file_type: Any) -> str:
    """`LlamaFileType` names as Ollama prints them: `Q4_K_M`, `F16`, `F32`."""
    if not isinstance(file_type, str):
        return ""
    return file_type.removeprefix("ALL_")
