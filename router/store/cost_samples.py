"""The samples a node's cost fits read (router/lending/costs.py): its own successful jobs
inside the sample window, newest first per (model, lane), capped so a busy day stays a cheap
read. Loads come from `Store.load_attempts.durations` (every successful load). `Store.costs`."""

from __future__ import annotations

from router.store.access import Access

PER_MODEL = 2000  # newest jobs per (model, lane): plenty for a median, bounded work

COST_SAMPLES = """
SELECT model, lane, duration_ms, queue_wait_ms FROM (
  SELECT model, lane, duration_ms, queue_wait_ms,
         ROW_NUMBER() OVER (PARTITION BY model, lane ORDER BY time DESC) AS rn
  FROM analytics_events
  WHERE time >= ? AND node_id = ? AND status >= 200 AND status < 300 AND aborted = 0
    AND model IS NOT NULL AND lane IS NOT NULL AND duration_ms IS NOT NULL
    AND answered_by IS NULL
) WHERE rn <= ?
"""

Sample = tuple[str, str, float, float | None]


class CostSamples:
    """This node's own samples (`node_id`), read on the reader connection."""

    def __init__(self, access: Access, node_id: str) -> None:
        self._db = access
        self._node_id = node_id

    async def samples(self, since: float) -> list[Sample]:
        rows = await self._db.rows(COST_SAMPLES, (since, self._node_id, PER_MODEL))
        return [
            (str(model), str(lane), float(duration_ms), queue_wait_ms)
            for model, lane, duration_ms, queue_wait_ms in rows
        ]
