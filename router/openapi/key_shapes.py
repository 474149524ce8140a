"""The shapes of `/router/v1/keys` (scoped keys, docs/configuration.md "Scoped keys")."""

from __future__ import annotations

from typing import Literal

from router.openapi.shapes import Shape

Priority = Literal["interactive", "batch"]


class KeyChange(Shape):
    """What PATCH changes (only the fields sent); the name and the secret never change."""

    models: list[str] | None = None
    priority: Priority = "interactive"
    max_concurrent: int | None = None
    daily_tokens: int | None = None


class KeyRequest(KeyChange):
    """A new key: its name, the models it may use (IDs or glob patterns; none: every model),
    its class, its cap on concurrent requests and its daily token quota (null: none)."""

    name: str


class Key(Shape):
    """One key, never its secret; `tokens_today` counts since 00:00 UTC."""

    name: str
    models: list[str]
    priority: Priority
    max_concurrent: int | None
    daily_tokens: int | None
    tokens_today: int
    created: float
    revoked: float | None


class KeyCreated(Key):
    """The new key and its secret: the only answer that carries it (it is not stored)."""

    secret: str


class KeyList(Shape):
    object: Literal["list"] = "list"
    data: list[Key]


class KeyRevoked(Shape):
    name: str
    revoked: float
