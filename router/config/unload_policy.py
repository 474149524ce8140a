"""`router_unload_policy`: which running runtimes stop before a config loads (pure).

A set of triggers, written as one bare value (the legacy shape) or a JSON array:
`none` and `all` (each absorbing: alone or not at all), the lanes `text`, `image`,
`embeddings`, `voice`, `music`, `family:<backend_mode>` (any runtime of that backend family)
and `config:<model id>` (one named sibling config). Lanes are static; `family:` and `config:`
depend on what runs when the load starts, so runtime.py resolves them then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from router.domain import BackendMode, Lane

ABSORBING = frozenset({"none", "all"})
_LANES = frozenset(lane.value for lane in Lane)
_FAMILIES = frozenset(mode.value for mode in BackendMode)


class PolicyError(ValueError):
    pass


def parse_triggers(value: Any) -> frozenset[str]:
    """The trigger set of a `router_unload_policy` value; raises PolicyError when malformed."""
    if value is None or value == "":
        return frozenset()
    entries = value if isinstance(value, list) else [value]
    if not all(isinstance(entry, str) and entry.strip() for entry in entries):
        raise PolicyError("router_unload_policy entries must be non-empty strings")
    triggers = frozenset(entry.strip() for entry in entries)
    for trigger in triggers:
        _check(trigger)
    if triggers & ABSORBING and len(triggers) > 1:
        raise PolicyError("router_unload_policy: none and all cannot be combined with others")
    return frozenset() if triggers == {"none"} else triggers


def _check(trigger: str) -> None:
    kind, _, name = trigger.partition(":")
    if trigger in ABSORBING or trigger in _LANES:
        return
    if kind == "family" and name in _FAMILIES:
        return
    if kind == "config" and name:
        return
    raise PolicyError(
        f"router_unload_policy: unknown entry {trigger!r}; use none, all, a lane "
        f"({', '.join(sorted(_LANES))}), family:<{'|'.join(sorted(_FAMILIES))}> or config:<id>"
    )


def static_lanes(triggers: Iterable[str]) -> frozenset[Lane]:
    """Lanes named outright (or every lane for `all`)."""
    triggers = frozenset(triggers)
    if "all" in triggers:
        return frozenset(Lane)
    return frozenset(Lane(t) for t in triggers if t in _LANES)


def evicts(triggers: Iterable[str], config_id: str, backend_mode: BackendMode) -> bool:
    """Whether a running runtime of this config / family is named by `family:` or `config:`."""
    triggers = frozenset(triggers)
    return f"config:{config_id}" in triggers or f"family:{backend_mode.value}" in triggers
