"""A scoped key as the router holds it, and the pure rules read from it: which models it may
use, when its daily token quota resets, what an admin may send to create or change one.

No I/O here: the book (book.py) keeps the live keys, the store keeps the rows.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from router.domain import Caller, Priority
from router.errors import BadRequest

DAY_SECONDS = 86400
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_MODELS = 256
# A relayed or lent request's caller, master to node (docs/security.md): "<name> <class>
# [<cap>]". Sent only with the cluster token; a node reads it only on its cluster routes.
CALLER_HEADER = "X-Router-Caller"
# What PATCH may change; the name and the secret never change (revoke and create instead).
CHANGEABLE = ("models", "priority", "max_concurrent", "daily_tokens")


@dataclass(frozen=True, slots=True)
class ScopedKey:
    """One key: its name, the digest of its secret (never the secret), its scope and limits."""

    name: str
    digest: bytes
    models: tuple[str, ...] = ()  # IDs or glob patterns; empty: every model
    priority: Priority = Priority.INTERACTIVE
    max_concurrent: int | None = None
    daily_tokens: int | None = None
    created: float = 0.0
    revoked: float | None = None

    @property
    def caller(self) -> Caller:
        return Caller(self.name, self.priority, self.max_concurrent)

    def allows(self, model: str) -> bool:
        """Whether the key may use `model` (an ID, matched exactly or by a glob pattern)."""
        if not self.models:
            return True
        return any(model == p or fnmatch.fnmatchcase(model, p) for p in self.models)

    def view(self, used_today: int) -> dict[str, Any]:
        """The key as GET /router/v1/keys shows it: everything but the digest."""
        return {
            "name": self.name,
            "models": list(self.models),
            "priority": self.priority.value,
            "max_concurrent": self.max_concurrent,
            "daily_tokens": self.daily_tokens,
            "tokens_today": used_today,
            "created": self.created,
            "revoked": self.revoked,
        }


def caller_header(caller: Caller) -> str:
    cap = f" {caller.max_concurrent}" if caller.max_concurrent is not None else ""
    return f"{caller.name} {caller.priority.value}{cap}"


def parse_caller(value: str | None) -> Caller | None:
    """The caller a master named in `X-Router-Caller`, or None (absent or malformed: the
    request is then an anonymous caller's, never refused for it)."""
    parts = (value or "").split()
    if len(parts) not in (2, 3) or not NAME.match(parts[0]):
        return None
    if parts[1] not in Priority.__members__.values():
        return None
    cap = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) > 0 else None
    if len(parts) == 3 and cap is None:
        return None
    return Caller(parts[0], Priority(parts[1]), cap)


def utc_day(wall: float) -> int:
    """The UTC day a wall-clock time falls on (quotas reset when it changes)."""
    return int(wall // DAY_SECONDS)


def seconds_to_reset(wall: float) -> float:
    """Seconds from `wall` until the next UTC midnight, when every daily quota resets."""
    return (utc_day(wall) + 1) * DAY_SECONDS - wall


def spec_from(body: Mapping[str, Any], *, creating: bool) -> dict[str, Any]:
    """The fields of a create or change request, checked; a bad one is a 400 naming it."""
    allowed = (("name",) if creating else ()) + CHANGEABLE
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}", param=unknown[0])
    spec: dict[str, Any] = {}
    if creating:
        name = body.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise BadRequest(
                "name: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
                param="name",
            )
        spec["name"] = name
    for field_name in CHANGEABLE:
        if field_name in body:
            spec[field_name] = _CHECKS[field_name](body[field_name])
    return spec


def changed(key: ScopedKey, spec: Mapping[str, Any]) -> ScopedKey:
    return replace(key, **{k: v for k, v in spec.items() if k in CHANGEABLE})


def _models(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_MODELS:
        raise BadRequest(
            f"models: a list of up to {MAX_MODELS} model IDs or glob patterns", param="models"
        )
    if not all(isinstance(m, str) and 0 < len(m) <= 256 for m in value):
        raise BadRequest(
            "models: each entry is a non-empty model ID or glob pattern", param="models"
        )
    return tuple(dict.fromkeys(value))


def _priority(value: Any) -> Priority:
    try:
        return Priority(value)
    except ValueError:
        raise BadRequest("priority: 'interactive' or 'batch'", param="priority") from None


def _positive_or_none(field_name: str) -> Any:
    def check(value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequest(f"{field_name}: a positive integer or null", param=field_name)
        return value

    return check


_CHECKS = {
    "models": _models,
    "priority": _priority,
    "max_concurrent": _positive_or_none("max_concurrent"),
    "daily_tokens": _positive_or_none("daily_tokens"),
}
