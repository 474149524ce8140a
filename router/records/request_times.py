"""How long one request of each configuration holds its runtime (the queue ETA's work ahead).

The same median-of-the-last-few tally as `LoadTimes`, fed by the runtime manager each time a
lease ends (grant to release: generation, streaming to the client, all of it). Nothing is
seeded from the store: until a configuration has served a request in this process its figure
is missing, and an ETA that needs it says `null`.
"""

from __future__ import annotations

from router.records.load_times import LoadTimes


class RequestTimes(LoadTimes):
    """Per configuration id: the median seconds a lease was held (`usual(model)`)."""

    def figures(self) -> dict[str, float]:
        return {
            model: usual for model in self._by_model if (usual := self.usual(model)) is not None
        }
