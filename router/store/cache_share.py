"""The share of prompt tokens each model took from its backend's cache, over its recent
requests (the WebUI's model page; issue 33). Only requests whose answer reported a cached
count take part (`cached_tokens` is NULL for the Ollama shape, which has no field for it).
`Store.cache_shares`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from router.store.access import Access

RECENT = 100  # newest requests per model: a hit rate that follows the use of today
WINDOW = 86400.0  # and none older than a day

# Walks the (model, time) index backwards; LIMIT bounds the work per model.
_SHARE = """
SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(cached_tokens), 0) FROM (
  SELECT prompt_tokens, cached_tokens FROM analytics_events
  WHERE model = ? AND time >= ? AND node_id = ? AND cached_tokens IS NOT NULL
    AND prompt_tokens > 0
  ORDER BY time DESC LIMIT ?
)
"""


class CacheShares:
    def __init__(self, access: Access, node_id: str) -> None:
        self._db = access
        self._node_id = node_id

    async def recent(self, models: Iterable[str], now: float) -> dict[str, dict[str, Any]]:
        """model -> {requests, prompt_tokens, cached_tokens, share}; share None without any."""
        found: dict[str, dict[str, Any]] = {}
        for model in models:
            rows = await self._db.rows(_SHARE, (model, now - WINDOW, self._node_id, RECENT))
            requests, prompt, cached = (int(v) for v in rows[0])
            found[model] = {
                "requests": requests,
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "share": cached / prompt if prompt else None,
            }
        return found
