"""What the manager owns: the live runtimes and the queues. The manager's parts (the pump,
the lifecycle, the live ledger) are handed this one table; none keeps a copy of it.
"""

from __future__ import annotations

from router.config import Settings
from router.domain import Caller, Lane
from router.runtime.queues import Queues
from router.runtime.state import Runtime, RuntimeState


class Table:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.runtimes: dict[str, Runtime] = {}
        self.queues = Queues()
        self.closing = False
        # Per caller name (router/runtime/fair.py): the leases it holds (its `max_concurrent`
        # cap) and its last grant's sequence number (the round robin's least recently served).
        self.running: dict[str, int] = {}
        self.served: dict[str, int] = {}
        self._grants = 0

    @property
    def by_memory(self) -> bool:
        """`runtime.residency: memory`: several runtimes per lane, loads evict by memory
        (read by the ledger alone: the pump and the decision do not know the mode)."""
        return self._settings.runtime.residency == "memory"

    def in_lane(self, lane: Lane) -> list[Runtime]:
        """The lane's runtimes; an asleep vLLM is in no lane (woken, not loaded, when wanted)."""
        return [
            rt
            for rt in self.runtimes.values()
            if lane in rt.spec.occupies and rt.state is not RuntimeState.SLEEPING
        ]

    def loading_in(self, lane: Lane) -> Runtime | None:
        return next((rt for rt in self.in_lane(lane) if rt.state is RuntimeState.LOADING), None)

    def asleep(self, key: str) -> bool:
        rt = self.runtimes.get(key)
        return rt is not None and rt.state is RuntimeState.SLEEPING and rt.asleep

    def free(self, runtime: Runtime | None) -> int | None:
        """Leases `runtime` can still take (None: no `runtime.max_in_flight` cap)."""
        cap = self._settings.runtime.max_in_flight
        if not cap or runtime is None:
            return None
        return max(0, cap - runtime.leases)

    def has_room(self, runtime: Runtime) -> bool:
        free = self.free(runtime)
        return free is None or free > 0

    def under_cap(self, caller: Caller) -> bool:
        cap = caller.max_concurrent
        return cap is None or self.running.get(caller.name, 0) < cap

    def take(self, caller: Caller) -> None:
        """`caller` holds one more lease."""
        self.running[caller.name] = self.running.get(caller.name, 0) + 1
        self._grants += 1
        self.served[caller.name] = self._grants

    def let_go(self, caller: Caller) -> None:
        """One of `caller`'s leases ended."""
        left = self.running.get(caller.name, 0) - 1
        if left > 0:
            self.running[caller.name] = left
        else:
            self.running.pop(caller.name, None)

    def drop(self, runtime: Runtime) -> None:
        """Its process is gone: it holds no lane and no memory any more."""
        if self.runtimes.get(runtime.key) is runtime:
            del self.runtimes[runtime.key]
        runtime.gone.set()


__all__ = ["Table"]
