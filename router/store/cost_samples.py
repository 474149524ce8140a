"""The samples a node's cost fits read (router/lending/costs.py): its own successful jobs
inside the sample window, newest first per (model, lane), capped so a busy day stays a cheap
read. Loads come from `Store.load_durations` (every successful load)."""

from __future__ import annotations

import aiosqlite

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
    """Mixin of `Store`: reads on the reader connection (a thread, off the event loop)."""

    _reader: aiosqlite.Connection
    node_id: str

    async def _settle(self) -> None:
        raise NotImplementedError

    async def cost_samples(self, since: float) -> list[Sample]:
        await self._settle()
        out: list[Sample] = []
        async with self._reader.execute(COST_SAMPLES, (since, self.node_id, PER_MODEL)) as cur:
            async for model, lane, duration_ms, queue_wait_ms in cur:
                out.append((str(model), str(lane), float(duration_ms), queue_wait_ms))
        return out
