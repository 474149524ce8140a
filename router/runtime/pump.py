"""The pump: every change of what runs where goes through `Pump.run()`, which asks the pure
policy what each lane does next and applies it (grants, drains, stops, loads). Re-entrant calls
are folded into the running pass; a deadline (a batch window closing) runs it again.

With one runtime per lane (`runtime.residency: lane`) a blocked load leaves a `Claim` in each
lane it needs emptied; with several (`memory`) a load keeps the plan it was first given
(`Pending`: victims and its oldest request's arrival) until it starts, so it stops exactly what
its plan (and a dry run just before it) named; a pending load nobody waits for any more is
dropped and its victims let out of their drain.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from router.config import Settings
from router.domain import Lane
from router.memory.eviction import MemoryRefusal
from router.runtime import residents, scheduler
from router.runtime.hooks import SwapHooks
from router.runtime.ledger import LiveLedger, named_by_policy
from router.runtime.lifecycle import Lifecycle
from router.runtime.queues import Claim, Entry
from router.runtime.residency import Pending
from router.runtime.state import Lease, Runtime, RuntimeSpec, RuntimeState
from router.runtime.table import Table

log = logging.getLogger(__name__)
Grant = Callable[[Runtime, float], Lease]
_MAX_PASSES = 64

_PHASES = {
    RuntimeState.LOADING: scheduler.Phase.LOADING,
    RuntimeState.READY: scheduler.Phase.READY,
    RuntimeState.STOPPING: scheduler.Phase.STOPPING,
    RuntimeState.SLEEPING: scheduler.Phase.STOPPING,  # going to sleep: leaving the lane
}


class Pump:
    def __init__(
        self,
        settings: Settings,
        table: Table,
        ledger: LiveLedger,
        life: Lifecycle,
        hooks: SwapHooks,
        clock: Callable[[], float],
        grant: Grant,
        after: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._table = table
        self._ledger = ledger
        self._life = life
        self._hooks = hooks
        self._clock = clock
        self._grant = grant
        self._after = after  # told after every pass (queue lengths may have changed)
        self._evicting: dict[str, Pending] = {}
        self._deadline: asyncio.TimerHandle | None = None
        self._pumping = False

    def run(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            for _ in range(_MAX_PASSES):  # each pass changes something or ends the loop
                if not any([self._pump_lane(lane) for lane in Lane]):
                    break
            else:
                log.warning(
                    "runtime pump: still changing after %d passes; the next event resumes it",
                    _MAX_PASSES,
                )
        finally:
            self._pumping = False
        self._arm_deadline()
        self._after()

    def close(self) -> None:
        if self._deadline:
            self._deadline.cancel()

    def serve_loaded_for(self, runtime: Runtime) -> None:
        """First serve the requests `runtime` was loaded for (scheduler.loaded_for: without
        this, a livelock found by R18), then pump."""
        order = self._settings.runtime.queue_order
        queues = self._table.queues
        for lane in runtime.spec.occupies:
            entries = queues.entries(lane)
            views = queues.scheduler_view(lane)
            loaded_for = [entries[i] for i in scheduler.loaded_for(views, runtime.key, order)]
            if loaded_for:
                self._grant_waiters(runtime, loaded_for)
        self.run()

    def victim_since(self) -> dict[str, float]:
        """Each runtime a pending load stops, with its oldest waiting request's arrival."""
        for key in [k for k in self._evicting if not self._table.queues.wants(k)]:
            del self._evicting[key]
        out: dict[str, float] = {}
        for pending in self._evicting.values():
            for key in pending.victims:
                out[key] = min(out.get(key, pending.since), pending.since)
        return out

    def lane_view(self, lane: Lane, runtime: Runtime | None) -> scheduler.LaneView:
        return scheduler.LaneView(
            _PHASES.get(runtime.state, scheduler.Phase.EMPTY) if runtime else scheduler.Phase.EMPTY,
            runtime.key if runtime else None,
            runtime.leases if runtime else 0,
            bool(runtime and lane in runtime.drain_requests),
            self._table.free(runtime),
        )

    # ---- one runtime per lane -------------------------------------------------------------

    def _pump_lane(self, lane: Lane) -> bool:
        if self._table.by_memory:
            return self._pump_many(lane)
        runtime = self._table.slots[lane]
        if runtime is not None and runtime.unload_requested:
            return runtime.leases == 0 and self._life.begin_stop(runtime)
        entries = self._table.queues.entries(lane)
        view = self.lane_view(lane, runtime)
        waiters = [scheduler.WaiterView(e.spec.key, e.enqueued_at, e.bypassed) for e in entries]
        rt = self._settings.runtime
        decision = scheduler.decide(
            view,
            waiters,
            self._clock(),
            rt.max_batch_wait,
            order=rt.queue_order,
            max_bypass=rt.max_bypass,
        )
        if decision.grant:
            self._table.queues.note_grants(entries, decision.grant)
        return self._apply(lane, runtime, entries, decision)

    def _apply(
        self,
        lane: Lane,
        runtime: Runtime | None,
        entries: list[Entry],
        decision: scheduler.Decision,
    ) -> bool:
        changed = False
        if runtime is not None:
            if decision.undrain and lane in runtime.drain_requests:
                runtime.drain_requests.discard(lane)
                changed = True
            if decision.drain and lane not in runtime.drain_requests:
                runtime.drain_requests.add(lane)
                changed = True
                # The load waits for this drain: read the incoming files ahead meanwhile.
                self._hooks.on_drain(
                    [e.spec for e in entries if e.spec.key != runtime.key],
                    [rt.spec for rt in self._table.runtimes.values()],
                    self._table.queues.wants,
                )
            if decision.grant and not runtime.draining:
                changed |= self._grant_waiters(runtime, [entries[i] for i in decision.grant])
            if decision.stop and runtime.leases == 0:
                changed |= self._life.begin_evict(runtime)  # a stop, or a vLLM sleep (sleep.py)
        if decision.load is not None:
            changed |= self._request_load(
                next(e.spec for e in entries if e.spec.key == decision.load)
            )
        return changed

    def _grant_waiters(self, runtime: Runtime, entries: list[Entry]) -> bool:
        for entry in entries:
            if isinstance(entry, Claim):  # a claim by this very runtime: satisfied
                self._table.queues.remove(entry)
            elif not entry.future.done():
                entry.future.set_result(self._grant(runtime, entry.enqueued_at))
        return bool(entries)

    def _request_load(self, spec: RuntimeSpec) -> bool:
        table = self._table
        asleep = table.runtimes.get(spec.key)
        if asleep is not None and asleep.state is not RuntimeState.SLEEPING:
            asleep = None
        if (spec.key in table.runtimes and asleep is None) or table.closing:
            return False
        added = False
        requires = spec.requires | self._evicted_lanes(spec)
        for lane in requires:
            holder = table.slots[lane]
            if holder is not None and holder.key != spec.key:
                added |= table.queues.claim(lane, spec, self._clock())
        if any(table.slots[lane] is not None for lane in requires):
            return added
        table.queues.drop_claims(spec.key)
        return self._start_or_wake(spec, asleep)

    def _evicted_lanes(self, spec: RuntimeSpec) -> frozenset[Lane]:
        """Lanes of running runtimes that `family:`/`config:` policy entries name."""
        return frozenset(
            lane
            for rt in self._table.runtimes.values()
            if rt.key != spec.key and named_by_policy(spec, rt)
            for lane in rt.spec.occupies
        )

    def _start_or_wake(self, spec: RuntimeSpec, asleep: Runtime | None) -> bool:
        if asleep is not None:  # woken instead of loaded (router/runtime/sleep.py)
            self._table.take_lanes(asleep)
            return self._life.wake(asleep)
        runtime = Runtime(spec)
        self._table.take_lanes(runtime)
        self._table.runtimes[spec.key] = runtime
        self._life.start(runtime)
        return True

    # ---- several runtimes per lane ----------------------------------------------------------

    def _residents(self, lane: Lane) -> list[residents.ResidentView]:
        since = self.victim_since()
        return [
            residents.ResidentView(
                rt.key,
                _PHASES.get(rt.state, scheduler.Phase.STOPPING),
                rt.leases,
                lane in rt.drain_requests,
                self._table.free(rt),
                since.get(rt.key),
                rt.unload_requested,
            )
            for rt in self._table.in_lane(lane)
        ]

    def _pump_many(self, lane: Lane) -> bool:
        queues = self._table.queues
        entries = queues.entries(lane)
        queue = queues.scheduler_view(lane)  # the same entries, in the same order
        rt = self._settings.runtime
        now, wait = self._clock(), rt.max_batch_wait
        order, bypass = rt.queue_order, rt.max_bypass
        decision = residents.decide_many(
            self._residents(lane), queue, now, wait, order=order, max_bypass=bypass
        )
        if decision.grant:
            queues.note_grants(entries, tuple(i for i, _ in decision.grant))
        return self._apply_many(lane, entries, decision)

    def _apply_many(
        self, lane: Lane, entries: list[Entry], decision: residents.ManyDecision
    ) -> bool:
        changed = False
        for runtime in self._table.in_lane(lane):
            if runtime.key in decision.undrain and lane in runtime.drain_requests:
                runtime.drain_requests.discard(lane)
                changed = True
            if runtime.key in decision.drain and lane not in runtime.drain_requests:
                runtime.drain_requests.add(lane)
                changed = True
            mine = [entries[i] for i, key in decision.grant if key == runtime.key]
            if mine and runtime.state is RuntimeState.READY and not runtime.draining:
                changed |= self._grant_waiters(runtime, mine)
            if runtime.key in decision.stop and runtime.leases == 0:
                # An unload stops; a victim stops or, a `router_sleep` vLLM, sleeps (sleep.py).
                evict = (
                    self._life.begin_stop if runtime.unload_requested else self._life.begin_evict
                )
                changed |= evict(runtime)
        if decision.load is not None:
            spec = next(e.spec for e in entries if e.spec.key == decision.load)
            changed |= self._load_alongside(spec)
        return changed

    def _load_alongside(self, spec: RuntimeSpec) -> bool:
        """Start `spec` once its plan's victims have exited; True when something changed."""
        table = self._table
        asleep = table.runtimes.get(spec.key)
        if asleep is not None and asleep.state is not RuntimeState.SLEEPING:
            return False  # loading, ready or leaving: nothing to start
        if table.closing or spec.key in self._ledger.oom_held:
            return False
        pending = self._evicting.get(spec.key)
        decided = pending is None
        if pending is None:
            try:
                plan = self._ledger.plan(spec)
            except MemoryRefusal as exc:  # the budget shrank under a waiting request
                table.queues.fail(spec.key, exc)
                return True
            if not plan.fits:
                return False  # pinned or loading runtimes hold the rest: wait for a change
            pending = self._pend(spec, frozenset(v.key for v in plan.evict))
        if any(self._holds(key, pending) for key in pending.victims):
            return decided  # victims drain and stop (or sleep); their exit pumps again
        del self._evicting[spec.key]
        return self._start_or_wake(spec, asleep)

    def _pend(self, spec: RuntimeSpec, victims: frozenset[str]) -> Pending:
        table = self._table
        since = min(
            (e.enqueued_at for e in table.queues.entries(spec.lane) if e.spec.key == spec.key),
            default=self._clock(),
        )
        pending = Pending(victims, since, frozenset(k for k in victims if table.asleep(k)))
        self._evicting[spec.key] = pending
        for key in pending.asleep:  # in no lane, so no pump stops it: stopped here
            self._life.begin_stop(table.runtimes[key])
        if pending.victims:  # the load waits for its victims: read its files ahead meanwhile
            resident = [rt.spec for rt in table.runtimes.values()]
            self._hooks.on_drain([spec], resident, table.queues.wants)
        return pending

    def _holds(self, key: str, pending: Pending) -> bool:
        """Does a victim still hold what the plan frees? One that went to sleep for it has
        freed its GPU memory (its weights stay in host RAM, which the sleep itself allowed)."""
        if key not in self._table.runtimes:
            return False
        return key in pending.asleep or not self._table.asleep(key)

    # ---- deadlines: a batch window closes -----------------------------------------------

    def _arm_deadline(self) -> None:
        if self._deadline:
            self._deadline.cancel()
            self._deadline = None
        deadlines = self._lane_deadlines() + (
            self._many_deadlines() if self._table.by_memory else []
        )
        if deadlines and not self._table.closing:
            loop = asyncio.get_running_loop()
            delay = max(0.0, min(deadlines) - self._clock()) + 0.001
            self._deadline = loop.call_later(delay, self.run)

    def _lane_deadlines(self) -> list[float]:
        wait = self._settings.runtime.max_batch_wait
        queues = self._table.queues
        return [
            d
            for lane in Lane
            if (rt := self._table.slots[lane]) is not None
            and rt.state is RuntimeState.READY
            and (d := scheduler.next_deadline(queues.scheduler_view(lane), rt.key, wait))
            is not None
        ]

    def _many_deadlines(self) -> list[float]:
        wait = self._settings.runtime.max_batch_wait
        return [
            d
            for lane in Lane
            for d in residents.victim_deadlines(self._residents(lane), wait)
            if any(self._table.queues.wants(r.key) for r in self._table.in_lane(lane))
        ]


__all__ = ["Pump"]
