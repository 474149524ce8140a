"""The usual load time of each model, for the `loading` event (the WebUI's progress bar).

Fed by the bus itself (`ready` events carry `load_seconds`) and seeded at start from the
store's past successful load attempts (kept when load captures are on). The usual time is the
median of the last few loads, so one cold-cache load does not move it far.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

KEEP = 10


class LoadTimes:
    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._by_model: dict[str, deque[float]] = {}

    def seed(self, durations: Mapping[str, Iterable[float]]) -> None:
        """Past loads, oldest first per model."""
        for model, seconds in durations.items():
            for value in seconds:
                self.add(model, value)

    def add(self, model: str, seconds: float) -> None:
        if seconds >= 0:
            self._by_model.setdefault(model, deque(maxlen=self._keep)).append(seconds)

    def usual(self, model: str) -> float | None:
        seen = self._by_model.get(model)
        return round(statistics.median(seen), 3) if seen else None

    def on_event(self, event: dict[str, Any]) -> None:
        """Bus callback: remember each successful load's duration."""
        if event.get("event") == "ready" and isinstance(event.get("load_seconds"), int | float):
            self.add(str(event.get("model")), float(event["load_seconds"]))

    def enrich(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Bus enricher: `loading` gets `usual_load_seconds` (null when never loaded)."""
        if event.get("event") != "loading":
            return None
        return {"usual_load_seconds": self.usual(str(event.get("model")))}
