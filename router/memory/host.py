"""Host room: how much host memory something that is not a runtime's load may take now.

Two swap hooks hold host memory beside the runtimes: a level-1 vLLM sleep moves the model's
weights to host RAM (router/runtime/sleep.py), and the read-ahead fills the page cache with the
next model's files (router/runtime/readahead.py). Both ask here, so the ledger's host budget
and `memory.reserve` bound them as they bound every load (docs/residency.md, "Where memory is
judged"). `host_room` is the rule (pure); `HostRoom` asks it with the runtime manager's live
ledger and what the kernel reports available now (devices.host_available).
"""

from __future__ import annotations

from collections.abc import Callable

from router.memory.devices import HOST, host_available
from router.memory.ledger import Ledger


def host_room(ledger: Ledger, available: int, reserve: int) -> int:
    """Bytes a new holder may take: what the ledger leaves free of the host budget (`auto` is
    RAM less `memory.reserve`), and never more than the kernel reports available less
    `memory.reserve`, since other programs hold memory that the ledger does not see."""
    return max(0, min(ledger.free(HOST), available - reserve))


class HostRoom:
    """The question the read-ahead and the vLLM sleep ask, with its inputs: the live ledger
    (its owner's), the reserve, and the reading of available memory (a seam for tests)."""

    def __init__(
        self,
        ledger: Callable[[], Ledger],
        reserve: int,
        available: Callable[[], int] = host_available,
    ) -> None:
        self._ledger = ledger
        self._reserve = reserve
        self._available = available

    def room(self, replacing: str | None = None) -> int:
        """`replacing`: the runtime key whose ledger entry the new holding replaces (a vLLM that
        goes to sleep: asleep, the ledger counts its weights in place of its figure)."""
        ledger = self._ledger()
        if replacing is not None:
            ledger = ledger.exited(replacing)
        return host_room(ledger, self._available(), self._reserve)


__all__ = ["HostRoom", "host_room"]
