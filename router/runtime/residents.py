"""The one decision (router/runtime/policy.py) under the names the several-runtimes-per-lane
tests use: `decide_many(residents, waiters, now, max_batch_wait, ...)`."""

from __future__ import annotations

from collections.abc import Sequence

from router.runtime.policy import (
    Decision,
    Policy,
    QueueOrder,
    ResidentView,
    Snapshot,
    WaiterView,
    decide,
    victim_deadlines,
)

ManyDecision = Decision


def decide_many(
    residents: Sequence[ResidentView],
    waiters: Sequence[WaiterView],
    now: float,
    max_batch_wait: float,
    *,
    order: QueueOrder = "grouped",
    max_bypass: int | None = None,
) -> Decision:
    return decide(Snapshot(residents, waiters, now, Policy(max_batch_wait, order, max_bypass)))


__all__ = ["ManyDecision", "ResidentView", "decide_many", "victim_deadlines"]
