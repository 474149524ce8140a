"""Pure queueing and swap decisions for one lane (no I/O, no clocks of its own).

The runtime manager describes a lane as plain values and applies whatever `decide()` returns.
Keeping the policy here lets it be tested exhaustively without processes:

- Requests for the loaded model are granted at once while nobody waits for another model.
- While others wait, requests for the loaded model still go first (batching, R17), but only
  until the oldest other waiter has waited `max_batch_wait`; then the lane drains.
- A runtime at its in-flight cap (`free` 0) takes no new lease until one is released; the
  waiters beyond it stay queued, bounded by the queue cap (R19).
- A draining runtime takes no new leases; when its last lease is released it stops, and the
  oldest waiter's model loads next. Running work is never cancelled (R15).

Two queue orders (`runtime.queue_order`, docs/swaps.md): `grouped` is the batching above, also
bounded by `max_bypass` (newer requests served ahead of an older waiter for another model);
`fifo` serves strictly in arrival order, so the lane drains as soon as the request at the head
of the queue is for another model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal

QueueOrder = Literal["grouped", "fifo"]


class Phase(Enum):
    EMPTY = "empty"  # nothing runs in the lane (or it failed / exited)
    LOADING = "loading"
    READY = "ready"
    STOPPING = "stopping"


@dataclass(frozen=True)
class LaneView:
    phase: Phase
    active: str | None  # runtime key serving the lane (a config can occupy several lanes)
    leases: int
    draining: bool
    free: int | None = None  # leases the active runtime can still take (None: no cap, R19)


@dataclass(frozen=True)
class WaiterView:
    key: str  # the runtime key the waiter needs
    enqueued_at: float
    bypassed: int = 0  # newer requests granted ahead of this one so far


@dataclass(frozen=True)
class Decision:
    grant: tuple[int, ...] = ()  # indexes into the waiter list, in queue order
    drain: bool = False  # stop taking leases on the active runtime
    undrain: bool = False  # nobody needs the swap any more
    stop: bool = False  # the active runtime has drained: stop it
    load: str | None = None  # start loading this key (the lane is empty)


NOTHING = Decision()


def decide(
    lane: LaneView,
    waiters: Sequence[WaiterView],
    now: float,
    max_batch_wait: float,
    *,
    order: QueueOrder = "grouped",
    max_bypass: int | None = None,
) -> Decision:
    """What `lane` does next. `max_bypass` None: no bypass bound (the window alone)."""
    if lane.phase is Phase.EMPTY:
        return Decision(load=waiters[0].key) if waiters else NOTHING
    if lane.phase is not Phase.READY:
        return NOTHING  # loading or stopping: waiters keep waiting
    matching = tuple(i for i, w in enumerate(waiters) if w.key == lane.active)
    if lane.free is not None:
        matching = matching[: max(0, lane.free)]
    others = [w for w in waiters if w.key != lane.active]
    if not others:
        return Decision(grant=matching, undrain=lane.draining)
    if lane.draining:
        return Decision(stop=True) if lane.leases == 0 else NOTHING
    if order == "fifo":
        return _fifo(lane, waiters, matching)
    if lane.leases == 0 and not matching:
        return Decision(drain=True, stop=True)  # idle, and only others wait: swap now
    window_open = now - min(w.enqueued_at for w in others) < max_batch_wait
    if window_open:
        # Running and new work for the loaded model goes on; the manager re-runs decide()
        # when the window closes (next_deadline) or the last lease is released.
        if max_bypass is not None:
            matching = _within_bypass(waiters, matching, max_bypass, lane.active)
            if not matching and any(w.bypassed >= max_bypass for w in others):
                return Decision(drain=True, stop=lane.leases == 0)
        return Decision(grant=matching) if matching else NOTHING
    return Decision(drain=True, stop=lane.leases == 0)


def _fifo(lane: LaneView, waiters: Sequence[WaiterView], matching: tuple[int, ...]) -> Decision:
    """Strict arrival order: only the loaded model's requests ahead of the first other one."""
    head = next(i for i, w in enumerate(waiters) if w.key != lane.active)
    ahead = tuple(i for i in matching if i < head)
    if ahead:
        return Decision(grant=ahead)
    if any(w.key == lane.active for w in waiters[:head]):
        return NOTHING  # at the in-flight cap: the loaded model's older requests wait for it
    return Decision(drain=True, stop=lane.leases == 0)


def _within_bypass(
    waiters: Sequence[WaiterView], matching: tuple[int, ...], max_bypass: int, active: str | None
) -> tuple[int, ...]:
    """The prefix of `matching` that passes no older waiter more than `max_bypass` times.

    Granting waiter m bypasses every other-model waiter queued before it; a prefix keeps the
    loaded model's own order (a later request never goes before an earlier one)."""
    budget = {i: max_bypass - w.bypassed for i, w in enumerate(waiters) if w.key != active}
    granted: list[int] = []
    for m in matching:
        older = [i for i in budget if i < m]
        if any(budget[i] <= 0 for i in older):
            break
        for i in older:
            budget[i] -= 1
        granted.append(m)
    return tuple(granted)


def loaded_for(waiters: Sequence[WaiterView], key: str, order: QueueOrder) -> tuple[int, ...]:
    """The waiters a runtime that just became ready serves first: those it was loaded for.

    They queued before it was ready, so the batch window of a later waiter for another model
    may have expired meanwhile; decide() would then stop the new runtime unused and load it
    again for the same waiters, forever. Grouped: every waiter for `key`; fifo: only those
    ahead of the first waiter for another model."""
    mine = tuple(i for i, w in enumerate(waiters) if w.key == key)
    if order == "fifo":
        head = next((i for i, w in enumerate(waiters) if w.key != key), len(waiters))
        return tuple(i for i in mine if i < head)
    return mine


def bypasses(count: int, granted: Sequence[int]) -> list[int]:
    """How many of the `granted` indexes each of `count` waiters was passed by (queue order)."""
    return [sum(1 for g in granted if g > i) for i in range(count)]


def next_deadline(
    waiters: Sequence[WaiterView], active: str | None, max_batch_wait: float
) -> float | None:
    """When the batching window of the oldest other-model waiter closes (to re-run decide)."""
    others = [w.enqueued_at for w in waiters if w.key != active]
    return min(others) + max_batch_wait if others else None


def retry_after(queue_len: int, max_queue: int) -> float:
    """A Retry-After hint that grows with the backlog; clients back off instead of hammering."""
    return 1.0 + 4.0 * min(1.0, queue_len / max(1, max_queue))
