"""Scoped keys in the store (migration 0010, docs/configuration.md "Scoped keys"):
`Store.scoped_keys`. Rows hold a key's digest, never its secret. The tokens each key used
since a moment come from the analytics rows, which name the key (`key_name`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from router.store.access import Access

COLUMNS = (
    "name",
    "digest",
    "models_json",
    "priority",
    "max_concurrent",
    "daily_tokens",
    "created",
    "revoked",
)
_INSERT = f"INSERT INTO scoped_keys ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_UPDATE = (
    "UPDATE scoped_keys SET models_json = ?, priority = ?, max_concurrent = ?, daily_tokens = ?"
    " WHERE name = ? AND revoked IS NULL"
)


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One row as stored (router.keys.ScopedKey is built from it above the store)."""

    name: str
    digest: bytes
    models: tuple[str, ...]
    priority: str
    max_concurrent: int | None
    daily_tokens: int | None
    created: float
    revoked: float | None


class ScopedKeyRows:
    def __init__(self, access: Access) -> None:
        self._access = access

    async def all(self) -> list[KeyRow]:
        rows = await self._access.rows(f"SELECT {', '.join(COLUMNS)} FROM scoped_keys")
        return [_row(r) for r in rows]

    async def insert(self, row: KeyRow) -> bool:
        """Adds the key; False when its name (or, never in practice, its digest) is taken."""
        taken = await self._access.rows(
            "SELECT 1 FROM scoped_keys WHERE name = ? OR digest = ?", (row.name, row.digest)
        )
        if taken:
            return False
        values = (
            row.name,
            row.digest,
            json.dumps(list(row.models)),
            row.priority,
            row.max_concurrent,
            row.daily_tokens,
            row.created,
            row.revoked,
        )
        await self._access.write(_INSERT, values)
        return True

    async def update(self, row: KeyRow) -> int:
        """The changeable fields of a live key; the rows changed (0: unknown or revoked)."""
        params = (
            json.dumps(list(row.models)),
            row.priority,
            row.max_concurrent,
            row.daily_tokens,
            row.name,
        )
        return await self._access.write(_UPDATE, params)

    async def revoke(self, name: str, at: float) -> int:
        return await self._access.write(
            "UPDATE scoped_keys SET revoked = ? WHERE name = ? AND revoked IS NULL", (at, name)
        )

    async def tokens_since(self, since: float) -> dict[str, int]:
        """Total tokens per key name in the analytics rows from `since` on."""
        rows = await self._access.rows(
            "SELECT key_name, COALESCE(SUM(total_tokens), 0) FROM analytics_events"
            " WHERE key_name IS NOT NULL AND time >= ? GROUP BY key_name",
            (since,),
        )
        return {str(name): int(total) for name, total in rows}


def _row(values: Sequence[Any]) -> KeyRow:
    name, digest, models, priority, cap, quota, created, revoked = values
    return KeyRow(
        name, bytes(digest), tuple(json.loads(models)), priority, cap, quota, created, revoked
    )
