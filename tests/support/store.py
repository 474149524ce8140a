"""A store on a real SQLite file, for the tests of the store and of what reads it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from router.config import AnalyticsSection
from router.store import Store


async def open_store(folder: Path, **analytics: Any) -> Store:
    """`folder`/router.sqlite on node `n1`; `analytics` are `AnalyticsSection` fields (the
    buffer flushed every 0.2 s unless told: the tests read what they wrote soon after)."""
    analytics.setdefault("flush_interval", 0.2)
    return await Store.open(
        folder / "router.sqlite", node_id="n1", analytics=AnalyticsSection(**analytics)
    )


@asynccontextmanager
async def store_at(folder: Path, **analytics: Any) -> AsyncIterator[Store]:
    """`open_store`, closed (flushed) when the block ends: what a test's `store` fixture yields."""
    store = await open_store(folder, **analytics)
    try:
        yield store
    finally:
        await store.close()
