"""Spellings older KoboldCpp releases saved in a `.kcpps`, renamed to the current keys before
a file is read (docs/kcpps.md). Called by `parse_kcpps` (kcpps.py) on the parsed JSON object.
"""

from __future__ import annotations

from typing import Any

from router.config.model_config import KcppsError


def migrate_legacy(raw: dict[str, Any]) -> None:
    """Rename spellings older KoboldCpp releases saved; the current key wins when both exist."""
    model = raw.pop("model", None)
    if not raw.get("model_param"):
        first = _first_model(model)
        if first:
            raw["model_param"] = first
    for old, new in (
        ("usecublas", "usecuda"),
        ("blasbatchsize", "batchsize"),
        ("sdclipl", "sdclip1"),
        ("sdclipg", "sdclip2"),
    ):
        value = raw.pop(old, None)
        if new not in raw and value not in (None, "", [], False):
            raw[new] = value
    usecuda = raw.get("usecuda")
    if isinstance(usecuda, list):
        for word, key, setting in (
            ("lowvram", "lowvram", True),
            ("nommq", "nommq", True),
            ("rowsplit", "splitmode", "row"),
        ):
            if word in usecuda:
                raw[key] = setting
    _migrate_sdconfig(raw, raw.pop("sdconfig", None))
    _migrate_hordeconfig(raw, raw.pop("hordeconfig", None))


def _first_model(value: Any) -> str | None:
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list):
        return next((v for v in value if isinstance(v, str) and v.strip()), None)
    if value is None:
        return None
    raise KcppsError("model must be a file path or a list of file paths")


def _migrate_sdconfig(raw: dict[str, Any], value: Any) -> None:
    # Old layout: [model file, clamp mode, threads, "quant"|"noquant"].
    if not value:
        return
    if not isinstance(value, list):
        raise KcppsError("sdconfig must be a list")
    if not raw.get("sdmodel"):
        raw["sdmodel"] = value[0]
    if len(value) > 1:
        raw["sdclamped"] = 512
    if len(value) > 2:
        raw["sdthreads"] = _legacy_int("sdconfig", value[2])
    if len(value) > 3:
        raw["sdquant"] = 2 if value[3] == "quant" else 0


def _migrate_hordeconfig(raw: dict[str, Any], value: Any) -> None:
    # Old layout: [model name, gen length, max context, api key, worker name].
    if not value:
        return
    if not isinstance(value, list):
        raise KcppsError("hordeconfig must be a list")
    if value[0] == "":
        return
    raw["hordemodelname"] = value[0]
    if len(value) > 1:
        raw["hordegenlen"] = _legacy_int("hordeconfig", value[1])
    if len(value) > 2:
        raw["hordemaxctx"] = _legacy_int("hordeconfig", value[2])
    if len(value) > 4:
        raw["hordekey"], raw["hordeworkername"] = value[3], value[4]


def _legacy_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise KcppsError(f"{key} holds a non-numeric count")
    try:
        return int(value)
    except (ValueError, OverflowError):
        raise KcppsError(f"{key} holds a non-numeric count") from None


__all__ = ["migrate_legacy"]
