"""Pure decisions for a lane that holds several runtimes (`runtime.residency: memory`; no I/O).

The manager describes the lane's runtimes and its queue as plain values and applies what
`decide_many()` returns (docs/residency.md, "Several runtimes per lane"):

- A request for a ready runtime in the lane is granted at once (up to its in-flight cap).
- The oldest request for a model that is not resident asks for a load; the manager's memory
  plan says whether it loads alongside or which runtimes it stops first (its victims).
- A victim keeps serving its own queue while the waiting load's oldest request has waited less
  than `max_batch_wait` (and no request for another model has been passed `max_bypass` times;
  with `fifo` it takes nothing new); then it drains, and stops once its last lease is released.
  An idle victim stops at once. Running work is never cancelled.
- A runtime nobody needs to stop any more is let out of its drain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from router.runtime.scheduler import Phase, QueueOrder, WaiterView


@dataclass(frozen=True)
class ResidentView:
    key: str
    phase: Phase
    leases: int
    draining: bool  # takes no new leases (a victim's drain)
    free: int | None = None  # leases it can still take (None: no cap)
    victim_since: float | None = None  # a waiting load stops it; its oldest request's arrival
    unloading: bool = False  # an explicit or idle unload: stops when drained


@dataclass(frozen=True)
class ManyDecision:
    grant: tuple[tuple[int, str], ...] = ()  # (waiter index, runtime key), in queue order
    drain: frozenset[str] = frozenset()
    undrain: frozenset[str] = frozenset()
    stop: frozenset[str] = frozenset()
    load: str | None = None  # the key of the oldest request for a model not in the lane


def decide_many(
    residents: Sequence[ResidentView],
    waiters: Sequence[WaiterView],
    now: float,
    max_batch_wait: float,
    *,
    order: QueueOrder = "grouped",
    max_bypass: int | None = None,
) -> ManyDecision:
    present = {r.key for r in residents}
    others = [w for w in waiters if w.key not in present]
    grant: list[tuple[int, str]] = []
    drain: set[str] = set()
    undrain: set[str] = set()
    stop: set[str] = set()
    for r in residents:
        if r.phase is not Phase.READY:
            continue
        mine = [i for i, w in enumerate(waiters) if w.key == r.key]
        if r.unloading:
            if r.leases == 0:
                stop.add(r.key)
            continue
        if r.victim_since is None:
            if r.draining:
                undrain.add(r.key)
            grant.extend((i, r.key) for i in _capped(mine, r.free))
            continue
        serving = not r.draining and _window_open(r, others, now, max_batch_wait, order, max_bypass)
        if serving and mine:
            grant.extend((i, r.key) for i in _capped(mine, r.free))
            continue
        if serving and r.leases > 0:
            continue  # its window is open: running work goes on, new work may still come
        if not r.draining:
            drain.add(r.key)
        if r.leases == 0:
            stop.add(r.key)
    load = others[0].key if others else None
    return ManyDecision(
        tuple(sorted(grant)), frozenset(drain), frozenset(undrain), frozenset(stop), load
    )


def _capped(indexes: list[int], free: int | None) -> list[int]:
    return indexes if free is None else indexes[: max(0, free)]


def _window_open(
    r: ResidentView,
    others: Sequence[WaiterView],
    now: float,
    max_batch_wait: float,
    order: QueueOrder,
    max_bypass: int | None,
) -> bool:
    """May a victim still take its own queued requests before it drains?"""
    if order == "fifo" or r.victim_since is None:
        return False
    if now - r.victim_since >= max_batch_wait:
        return False
    return max_bypass is None or all(w.bypassed < max_bypass for w in others)


def victim_deadlines(residents: Sequence[ResidentView], max_batch_wait: float) -> tuple[float, ...]:
    """When the victims' batch windows close (the manager re-runs `decide_many` then)."""
    return tuple(
        r.victim_since + max_batch_wait
        for r in residents
        if r.victim_since is not None and not r.draining
    )


__all__ = ["ManyDecision", "ResidentView", "decide_many", "victim_deadlines"]
