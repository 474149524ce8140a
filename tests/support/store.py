"""A store on a real SQLite file for the store's own tests (tests/store/)."""

from __future__ import annotations

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
