"""The lending settings' layers (docs/lending.md): default < config file < value saved from the
WebUI. Pure: resolving the layers, validating a saved batch whole, describing each key for the
WebUI. The service (`Lending.save_settings`, router/lending/service.py) does the store and
the push.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from annotated_types import Ge, Gt, Le
from pydantic import ValidationError

from router.config import LendingSettings, parse_duration
from router.errors import BadRequest
from router.lending.links import LendingValues

KeyType = Literal["integer", "duration", "boolean"]
KEYS: tuple[str, ...] = tuple(LendingSettings.model_fields)

DESCRIPTIONS: Mapping[str, str] = {
    "scheduling_refresh_interval": "Fallback tick for refitting costs and planning leases.",
    "scheduling_sample_window": (
        "Analytics younger than this feed the cost fits; at most analytics.raw_retention."
    ),
    "scheduling_min_samples": "Samples a node needs before its own cost fit is trusted.",
    "scheduling_backend_depth": (
        "Requests a linked model admits to its backend at once; the rest wait in the router."
    ),
    "scheduling_grant_ttl": "Lifetime of a lease unless the master renews it.",
    "scheduling_context_reserve": (
        "Tokens reserved for the answer when a queued request states no max_tokens."
    ),
    "offload_restore_delay": "Quiet time before a helper reloads the model it held before.",
    "offload_probe_idle": "Helper idle time before it is sent a one-request probe.",
    "offload_faster_helper_slots": "Lent requests at once to a helper faster than the owner.",
    "offload_slower_helper_slots": "Lent requests at once to a helper slower than the owner.",
    "offload_probe_helper_slots": "Lent requests at once to a probed helper.",
    "offload_hold_for_faster_helper": (
        "Leave the owner's second slot empty when a faster helper would finish sooner."
    ),
    "offload_decisions_retention": "How long lending decisions are kept in the store.",
}


@dataclass(frozen=True, slots=True)
class KeyInfo:
    key: str
    type: KeyType
    default: Any
    min: int | None
    max: int | None
    description: str


def _info(key: str) -> KeyInfo:
    field = LendingSettings.model_fields[key]
    low = high = None
    for item in field.metadata:
        if isinstance(item, Ge):
            low = int(item.ge)  # type: ignore[call-overload]
        elif isinstance(item, Le):
            high = int(item.le)  # type: ignore[call-overload]
    kind: KeyType = "boolean" if field.annotation is bool else "integer"
    if any(isinstance(item, Gt) for item in field.metadata) or field.annotation is float:
        kind = "duration"
    return KeyInfo(key, kind, field.default, low, high, DESCRIPTIONS.get(key, ""))


INFO: Mapping[str, KeyInfo] = {key: _info(key) for key in KEYS}


def coerce(key: str, value: Any) -> int | float | bool:
    """One value of a batch in its key's type (ranges are checked on the whole); BadRequest
    naming the key for an unknown key or a value of the wrong type."""
    info = INFO.get(key)
    if info is None:
        raise BadRequest(f"unknown lending setting {key[:64]!r}", param=key[:64])
    if info.type == "boolean":
        if not isinstance(value, bool):
            raise BadRequest(f"{key} must be true or false", param=key)
        return value
    if isinstance(value, bool):
        raise BadRequest(f"{key} must be a {info.type}, not a boolean", param=key)
    if info.type == "integer":
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        if not isinstance(value, int):
            raise BadRequest(f"{key} must be a whole number", param=key)
        return value
    try:
        seconds = parse_duration(value)
    except ValueError as err:
        raise BadRequest(f"{key}: {err}", param=key) from None
    if seconds <= 0:
        raise BadRequest(f"{key} must be a positive duration", param=key)
    return seconds


def resolve(config: LendingSettings, saved: Mapping[str, Any]) -> LendingSettings:
    """The effective values: each saved value over the config file's (ValidationError if a
    saved value is out of range)."""
    return LendingSettings.model_validate(config.model_dump() | dict(saved))


def window_problem(values: LendingSettings, raw_retention: float) -> str | None:
    if values.scheduling_sample_window > raw_retention:
        return (
            f"scheduling_sample_window ({values.scheduling_sample_window:g}s) must not exceed "
            f"analytics.raw_retention ({raw_retention:g}s): older analytics are gone"
        )
    return None


def apply_batch(
    batch: Any, saved: Mapping[str, Any], config: LendingSettings, raw_retention: float
) -> tuple[dict[str, Any], LendingSettings]:
    """The saved layer after `batch` (`null` removes a key's saved value) and the values it
    resolves to; any invalid entry refuses the whole batch with a 400 naming its key."""
    if not isinstance(batch, dict):
        raise BadRequest('"settings" must be an object of key: value', param="settings")
    new = dict(saved)
    for key, value in batch.items():
        if key not in INFO:
            raise BadRequest(f"unknown lending setting {str(key)[:64]!r}", param=str(key)[:64])
        if value is None:
            new.pop(key, None)
        else:
            new[key] = coerce(key, value)
    try:
        values = resolve(config, new)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        key = str(first["loc"][0]) if first["loc"] else "settings"
        raise BadRequest(f"{key}: {first['msg']}", param=key) from None
    problem = window_problem(values, raw_retention)
    if problem is not None:
        raise BadRequest(problem, param="scheduling_sample_window")
    return new, values


def usable_saved(
    config: LendingSettings, saved: Mapping[str, Any], raw_retention: float
) -> tuple[dict[str, Any], list[str]]:
    """At start: the saved values that still apply (a key removed from the schema, or a value
    the config file's new limits refuse, is left out) and what was left out, to log."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in saved.items():
        try:
            apply_batch({key: value}, kept, config, raw_retention)
        except BadRequest as err:
            dropped.append(f"{key}: {err.message}")
            continue
        kept[key] = coerce(key, value)
    return kept, dropped


def listing(
    config: LendingSettings, saved: Mapping[str, Any], values: LendingSettings
) -> dict[str, Any]:
    """The GET shape: one entry per key in schema order."""
    return {
        "settings": [
            {
                "key": info.key,
                "type": info.type,
                "default": info.default,
                "config": getattr(config, info.key),
                "saved": saved.get(info.key),
                "effective": getattr(values, info.key),
                "min": info.min,
                "max": info.max,
                "description": info.description,
            }
            for info in INFO.values()
        ],
        "hot_reload": True,
    }


class LendingLayers(LendingValues):
    """`app[LENDING]` with its layers: the config file's values, the saved ones, and the lock
    that makes a save (validate, store, replace) one step. On a slave, `pushed` says the
    master's values replaced the local ones."""

    def __init__(self, config: LendingSettings, saved: Mapping[str, Any]) -> None:
        super().__init__(resolve(config, saved))
        self.config = config
        self.saved: dict[str, Any] = dict(saved)
        self.pushed = False
        self.lock = asyncio.Lock()
