"""The pump: every change of what runs where goes through `Pump.run()`, which asks the one
pure decision (router/runtime/policy.py) what each lane does next and applies it (grants,
drains, stops, loads). Re-entrant calls are folded into the running pass; a deadline (a batch
window closing) runs it again. The pump does not know the residency mode: the ledger names a
load's victims (the lane's occupant with one runtime per lane, the memory plan's otherwise).

A load keeps the victims it was first given (`Pending`, with its oldest request's arrival,
which opens their batch window) until they are gone, so it stops exactly what its plan (and a
dry run just before it) named; then it is planned again, and starts when nothing more must
go. A pending load nobody waits for any more is dropped and its victims let out of their drain.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from router.config import Settings
from router.domain import Caller, Lane
from router.memory.eviction import MemoryRefusal
from router.runtime import fair, policy
from router.runtime.holdings import Pending
from router.runtime.hooks import SwapHooks
from router.runtime.ledger import LiveLedger
from router.runtime.lifecycle import Lifecycle
from router.runtime.load_trace import parent_of
from router.runtime.queues import Waiter
from router.runtime.state import Lease, Runtime, RuntimeSpec, RuntimeState
from router.runtime.table import Table

log = logging.getLogger(__name__)
Grant = Callable[[Runtime, float, Caller], Lease]  # (runtime, arrival, caller)
_MAX_PASSES = 64

_PHASES = {
    RuntimeState.LOADING: policy.Phase.LOADING,
    RuntimeState.READY: policy.Phase.READY,
    RuntimeState.STOPPING: policy.Phase.STOPPING,
}


@dataclass(eq=False)
class Pump:
    """Built by the manager (positional: its parts, then `grant` for a queued waiter's lease
    and `after`, told after every pass: queue lengths may have changed)."""

    _settings: Settings
    _table: Table
    _ledger: LiveLedger
    _life: Lifecycle
    _hooks: SwapHooks
    _clock: Callable[[], float]
    _grant: Grant
    _after: Callable[[], None]
    _evicting: dict[str, Pending] = field(default_factory=dict, init=False)
    _deadline: asyncio.TimerHandle | None = field(default=None, init=False)
    _pumping: bool = field(default=False, init=False)

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
        rt, table = self._settings.runtime, self._table
        runtime.ready_clock = now = self._clock()  # decide() serves the rest of its firsts by it
        for lane in runtime.spec.occupies:
            entries = table.queues.entries(lane)
            views = table.queues.scheduler_view(lane)
            free = table.free(runtime)
            counts = (table.running, table.served)
            serve = fair.serve_order(views, now, rt.batch_promote_after, counts)
            firsts = policy.loaded_for(
                views, runtime.key, rt.queue_order, table.running, free, serve
            )
            loaded_for = [entries[i] for i in firsts]
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

    def victims_of(self, spec: RuntimeSpec) -> frozenset[str]:
        """What a load of `spec` waits for: its pending plan's victims, else those the ledger
        would name now (none when it cannot tell)."""
        pending = self._evicting.get(spec.key)
        if pending is not None:
            return pending.victims
        try:
            return self._ledger.victims(spec) or frozenset()
        except MemoryRefusal:
            return frozenset()

    def _urgent_victims(self) -> set[str]:
        """The runtimes a pending load stops for an interactive (or promoted) request."""
        promote, now = self._settings.runtime.batch_promote_after, self._clock()
        entries = [e for lane in Lane for e in self._table.queues.entries(lane)]
        out: set[str] = set()
        for key, pending in self._evicting.items():
            if any(e.spec.key == key and fair.urgent(e, now, promote) for e in entries):
                out |= pending.victims
        return out

    def _residents(self, lane: Lane) -> list[policy.ResidentView]:
        since = self.victim_since()
        urgent = self._urgent_victims()
        return [
            policy.ResidentView(
                rt.key,
                _PHASES.get(rt.state, policy.Phase.STOPPING),
                rt.leases,
                lane in rt.drain_requests,
                self._table.free(rt),
                since.get(rt.key),
                rt.unload_requested,
                rt.interactive_at,
                rt.key in urgent,
                rt.ready_clock,
            )
            for rt in self._table.in_lane(lane)
        ]

    def snapshot(self, lane: Lane) -> policy.Snapshot:
        """The decision's input for `lane` now (the ETA replays the same decision on it)."""
        rt = self._settings.runtime
        rules = policy.Policy(
            rt.max_batch_wait,
            rt.queue_order,
            rt.max_bypass,
            rt.interactive_guard,
            rt.batch_promote_after,
        )
        waiters = tuple(self._table.queues.scheduler_view(lane))
        residents = tuple(self._residents(lane))
        table = self._table
        now = self._clock()
        return policy.Snapshot(
            residents, waiters, now, rules, dict(table.running), dict(table.served)
        )

    def _pump_lane(self, lane: Lane) -> bool:
        entries = self._table.queues.entries(lane)  # the snapshot's waiters, in the same order
        snapshot = self.snapshot(lane)
        decision = policy.decide(snapshot)
        if decision.grant:
            granted = [i for i, _ in decision.grant]
            self._table.queues.note_grants(entries, policy.passed(snapshot, granted))
        return self._apply(lane, entries, decision)

    def _apply(self, lane: Lane, entries: list[Waiter], decision: policy.Decision) -> bool:
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
            changed |= self._load(spec)
        return changed

    def _load(self, spec: RuntimeSpec) -> bool:
        """Start `spec` once its plan's victims have exited; True when something changed."""
        table = self._table
        asleep = table.runtimes.get(spec.key)
        if asleep is not None and asleep.state is not RuntimeState.SLEEPING:
            return False  # loading, ready or leaving: nothing to start
        if table.closing or spec.key in self._ledger.oom_held:
            return False
        pending = self._evicting.get(spec.key)
        if pending is not None:
            if any(self._holds(key, pending) for key in pending.victims):
                return False  # victims drain and stop (or sleep); their exit pumps again
            del self._evicting[spec.key]  # gone: planned again (another may have loaded)
        try:
            victims = self._ledger.victims(spec)
        except MemoryRefusal as exc:  # the budget shrank under a waiting request
            table.queues.fail(spec.key, exc)
            return True
        if victims is None:  # pinned or loading runtimes hold the rest: wait for a change
            self._ledger.ask_back(spec)  # ... and ask back what this node lends of it
            return False
        if victims:
            self._pend(spec, victims)
            return True
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

    def _grant_waiters(self, runtime: Runtime, entries: list[Waiter]) -> bool:
        for entry in entries:
            if not entry.future.done():
                entry.future.set_result(self._grant(runtime, entry.enqueued_at, entry.caller))
        return bool(entries)

    def _start_or_wake(self, spec: RuntimeSpec, asleep: Runtime | None) -> bool:
        if asleep is not None:  # woken instead of loaded (router/runtime/sleep.py)
            return self._life.wake(asleep)
        runtime = Runtime(spec)
        self._table.runtimes[spec.key] = runtime
        # Its estimate (a GGUF header read, up to a second) is read off the loop beside the
        # load: the host room (memory/host.py) reads the ledger on the loop at a later swap,
        # and with `residency: lane` admission estimates nothing.
        self._life.spawn(self._ledger.holdings.prepare([spec]))
        self._life.start(runtime, parent_of(self._table.queues.entries(spec.lane), spec.key))
        return True

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
        deadlines = self._deadlines()
        if deadlines and not self._table.closing:
            loop = asyncio.get_running_loop()
            delay = max(0.0, min(deadlines) - self._clock()) + 0.001
            self._deadline = loop.call_later(delay, self.run)

    def _deadlines(self) -> list[float]:
        """Batch windows closing, interactive guards lapsing, batch requests promoted."""
        wait = self._settings.runtime.max_batch_wait
        windows = [
            d
            for lane in Lane
            for d in policy.victim_deadlines(self._residents(lane), wait)
            if any(self._table.queues.wants(r.key) for r in self._table.in_lane(lane))
        ]
        now = self._clock()
        clock = [d for lane in Lane for d in policy.clock_deadlines(self.snapshot(lane)) if d > now]
        return windows + clock


__all__ = ["Pump"]
