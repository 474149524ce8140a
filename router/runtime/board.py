"""The queue board: every lane's waiting requests in serve order with position and ETA
(`GET /router/v1/status`, the SSE wait announcements), and the coalesced `activity` and
`queue_position` events. It reads the manager's table and replays the pump's own decision
(eta.py) on the pump's snapshot; it changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from router.config import Settings
from router.domain import Lane
from router.records import EventBus
from router.records.request_times import RequestTimes
from router.records.swap_times import SwapTimes
from router.runtime import eta, eta_inputs
from router.runtime.activity import ActivityReporter
from router.runtime.hooks import SwapHooks
from router.runtime.pump import Pump
from router.runtime.queues import Ticket, Waiter
from router.runtime.state import Runtime
from router.runtime.table import Table


class QueueBoard:
    def __init__(
        self,
        settings: Settings,
        table: Table,
        pump: Pump,
        events: EventBus,
        clock: Callable[[], float],
        usual_load: Callable[[str], float | None],
        swaps: tuple[SwapTimes, SwapHooks],
    ) -> None:
        """`swaps`: the lifecycle's swap times, and the swap hooks (with any, a KV save and
        restore are counted; a runtime they would put to sleep is priced a sleep)."""
        self._settings = settings
        self._table = table
        self._pump = pump
        self._clock = clock
        self._usual_load = usual_load  # per config: usual load seconds (LoadTimes)
        self.request_times = RequestTimes()  # per config: seconds a lease is held
        self._swap_times, self._hooks = swaps
        self._hooked = not self._hooks.empty
        # `queue_position`: positions and ETAs, coalesced like `activity` (waiting_s aside,
        # which changes every instant, an event only when they differ).
        self._positions = ActivityReporter(
            events.publish, self._positions_now, event="queue_position", same=_positions_only
        )
        self._activity = ActivityReporter(events.publish, self._activity_now)

    def poke(self) -> None:
        """Queue lengths, leases or states changed: `activity` and `queue_position` soon."""
        self._activity.poke()
        self._positions.poke()

    def close(self) -> None:
        self._activity.close()
        self._positions.close()

    def queue_status(self) -> dict[str, list[Any]]:
        return {lane.value: [row for _, row in self._ranked(lane)] for lane in Lane}

    def position(self, ticket: Ticket) -> dict[str, Any] | None:
        waiter = ticket.waiter
        if waiter is None or waiter.gone:
            return None
        return next((row for entry, row in self._ranked(waiter.lane) if entry is waiter), None)

    def _activity_now(self) -> dict[str, Any]:
        """What the `activity` event carries (docs/events.md)."""
        queues = self._table.queues
        return {
            "queued": {lane.value: queues.waiting(lane) for lane in Lane},
            "in_flight": {key: rt.leases for key, rt in self._table.runtimes.items()},
        }

    def _positions_now(self) -> dict[str, Any]:
        return {"queue": self.queue_status()}

    def _ranked(self, lane: Lane) -> list[tuple[Waiter, dict[str, Any]]]:
        rt = self._settings.runtime
        policy = eta.Policy(
            rt.max_batch_wait,
            rt.queue_order,
            rt.max_bypass,
            rt.max_in_flight,
            rt.interactive_guard,
            rt.batch_promote_after,
        )
        entries = self._table.queues.entries(lane)
        if not entries:  # nothing waits: no replay (every lane, 4 times a second, when busy)
            return []
        queued = [
            eta.Queued(e.spec.key, e.spec.config.id, e.enqueued_at, e.bypassed, caller=e.caller)
            for e in entries
        ]
        lane_state = self._lane_state(lane, entries)
        models = {q.model for q in queued} | {r.model for r in lane_state.residents}
        timings = eta_inputs.timings(
            models, self._usual_load, self.request_times, self._swap_times, self._hooked
        )
        ranked = eta.ranked(lane_state, queued, self._clock(), policy, {}, {}, timings)
        return [(entries[i], row) for i, row in ranked]

    def _lane_state(self, lane: Lane, entries: list[Waiter]) -> eta.LaneState:
        """The lane's runtimes as the pump's decision sees them, and each waiting load's
        victims (its pending plan's, else what the ledger would name now)."""
        runtimes, now, wall = self._table.runtimes, self._clock(), time.time()
        residents = tuple(
            eta_inputs.resident(
                view, runtimes[view.key], now, wall, self._sleeps(runtimes[view.key])
            )
            for view in self._pump.snapshot(lane).residents
        )
        specs = {e.spec.key: e.spec for e in entries}  # one plan per waiting runtime
        victims = {key: self._pump.victims_of(spec) for key, spec in specs.items()}
        asleep = frozenset(key for key in specs if self._table.asleep(key))  # woken, not loaded
        table = self._table
        return eta.LaneState(
            residents,
            victims,
            not table.by_memory,
            asleep,
            running=dict(table.running),
            served=dict(table.served),
        )

    def _sleeps(self, runtime: Runtime) -> bool:
        """Would a swap put `runtime` to sleep rather than stop it (the ETA prices a sleep)?"""
        return self._hooked and self._hooks.would_park(runtime)


def _positions_only(event: dict[str, Any]) -> Any:
    """What a `queue_position` change is: the rows without `waiting_s`."""
    return {
        lane: [(r["model"], r["position"], r["eta_s"]) for r in rows]
        for lane, rows in event["queue"].items()
    }


__all__ = ["QueueBoard"]
