"""The one shape of upsert the store writes: insert a row, or on its key overwrite the rest."""

from __future__ import annotations

from collections.abc import Sequence


def upsert_sql(table: str, columns: Sequence[str], *key: str) -> str:
    """An INSERT of `columns` that, when a row with the same `key` columns exists, sets every
    other column to the new value (SQLite's `excluded`)."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )
