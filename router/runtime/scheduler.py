"""The one decision (router/runtime/policy.py) seen through one lane that holds one runtime
(`runtime.residency: lane`): the lane's occupant is the forced victim of every other model's
load, its window opened by the oldest waiter for another model. Kept as a view for the tests
of queue order and batching, which read most plainly in lane terms:

- Requests for the loaded model are granted at once while nobody waits for another model.
- While others wait, requests for the loaded model still go first (batching, R17), but only
  until the oldest other waiter has waited `max_batch_wait` (or was passed `max_bypass`
  times); then the lane drains. With `fifo` only those ahead of the first other one.
- A runtime at its in-flight cap (`free` 0) takes no new lease until one is released (R19).
- A draining runtime takes no new leases; when its last lease is released it stops, and the
  oldest waiter's model loads next. Running work is never cancelled (R15).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from router.runtime.policy import (
    Phase,
    Policy,
    QueueOrder,
    ResidentView,
    Snapshot,
    WaiterView,
    bypasses,
    loaded_for,
)
from router.runtime.policy import (
    decide as decide_one,
)


@dataclass(frozen=True)
class LaneView:
    phase: Phase
    active: str | None  # runtime key serving the lane (a config can occupy several lanes)
    leases: int
    draining: bool
    free: int | None = None  # leases the active runtime can still take (None: no cap, R19)


@dataclass(frozen=True)
class Decision:
    grant: tuple[int, ...] = ()  # indexes into the waiter list, in queue order
    drain: bool = False  # stop taking leases on the active runtime
    undrain: bool = False  # nobody needs the swap any more
    stop: bool = False  # the active runtime has drained: stop it
    load: str | None = None  # start loading this key (the lane is empty)


NOTHING = Decision()


def resident(lane: LaneView, waiters: Sequence[WaiterView]) -> ResidentView:
    """The lane's occupant as the one decision sees it: every waiter for another model is a
    load that stops it, so its window opens with the oldest of them."""
    others = [w.enqueued_at for w in waiters if w.key != lane.active]
    since = min(others) if others else None
    return ResidentView(lane.active or "", lane.phase, lane.leases, lane.draining, lane.free, since)


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
    policy = Policy(max_batch_wait, order, max_bypass)
    d = decide_one(Snapshot((resident(lane, waiters),), waiters, now, policy))
    # The lane holds one runtime: a load waits until it is empty.
    return Decision(tuple(i for i, _ in d.grant), bool(d.drain), bool(d.undrain), bool(d.stop))


def next_deadline(
    waiters: Sequence[WaiterView], active: str | None, max_batch_wait: float
) -> float | None:
    """When the batching window of the oldest other-model waiter closes (to re-run decide)."""
    others = [w.enqueued_at for w in waiters if w.key != active]
    return min(others) + max_batch_wait if others else None


def retry_after(queue_len: int, max_queue: int) -> float:
    """A Retry-After hint that grows with the backlog; clients back off instead of hammering."""
    return 1.0 + 4.0 * min(1.0, queue_len / max(1, max_queue))


__all__ = [
    "Decision",
    "LaneView",
    "Phase",
    "QueueOrder",
    "WaiterView",
    "bypasses",
    "decide",
    "loaded_for",
    "next_deadline",
    "resident",
    "retry_after",
]
