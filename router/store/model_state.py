"""Model state in the store (`model_state`): which models an admin disabled, kept across
restarts. `Store.model_states`: `disabled` and `set_disabled`."""

from __future__ import annotations

import time

from router.store.access import Access
from router.store.upsert import upsert_sql

_UPSERT = upsert_sql("model_state", ("model_id", "disabled", "updated_at"), "model_id")


class ModelStates:
    def __init__(self, access: Access) -> None:
        self._db = access

    async def disabled(self) -> set[str]:
        rows = await self._db.rows("SELECT model_id FROM model_state WHERE disabled = 1")
        return {row[0] for row in rows}

    async def set_disabled(self, model_id: str, disabled: bool) -> None:
        """Persist one model's state; returns once it is on disk."""
        await self._db.write(_UPSERT, (model_id, int(disabled), time.time()))
