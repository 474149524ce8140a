"""Several runtimes per lane (`runtime.residency: memory`; docs/residency.md): the manager's
pump for such a lane, and a load that starts alongside the lane's runtimes once its plan's
victims have exited.

The decisions are pure (`residents.decide_many`, `planning`'s plan); this layer applies them.
A pending load keeps the plan it was first given (`_evicting`: victims and the arrival of its
oldest request) until it starts, so it stops exactly what its plan (and a dry run just before
it) named; a pending load nobody waits for any more is dropped and its victims let out of
their drain.
"""

from __future__ import annotations

from router.domain import Lane
from router.memory.eviction import MemoryRefusal
from router.runtime import residents
from router.runtime.planning import Pending, Planning
from router.runtime.queues import Entry
from router.runtime.scheduler import Phase
from router.runtime.state import Runtime, RuntimeSpec, RuntimeState

_PHASES = {
    RuntimeState.LOADING: Phase.LOADING,
    RuntimeState.READY: Phase.READY,
    RuntimeState.STOPPING: Phase.STOPPING,
}


class ManyLanes(Planning):
    def _in_lane(self, lane: Lane) -> list[Runtime]:
        """The lane's runtimes; an asleep vLLM is in no lane (woken, not loaded, when wanted)."""
        return [
            rt
            for rt in self._runtimes.values()
            if lane in rt.spec.occupies and rt.state is not RuntimeState.SLEEPING
        ]

    def _loading_in(self, lane: Lane) -> Runtime | None:
        return next((rt for rt in self._in_lane(lane) if rt.state is RuntimeState.LOADING), None)

    def _victim_since(self) -> dict[str, float]:
        """Each runtime a pending load stops, with its oldest waiting request's arrival."""
        self._drop_unwanted()
        out: dict[str, float] = {}
        for pending in self._evicting_many.values():
            for key in pending.victims:
                out[key] = min(out.get(key, pending.since), pending.since)
        return out

    def _drop_unwanted(self) -> None:
        for key in [k for k in self._evicting_many if not self._queues.wants(k)]:
            del self._evicting_many[key]

    def _residents(self, lane: Lane) -> list[residents.ResidentView]:
        since = self._victim_since()
        return [
            residents.ResidentView(
                rt.key,
                _PHASES.get(rt.state, Phase.STOPPING),
                rt.leases,
                lane in rt.drain_requests,
                self._free(rt),
                since.get(rt.key),
                rt.unload_requested,
            )
            for rt in self._in_lane(lane)
        ]

    def _pump_many(self, lane: Lane) -> bool:
        entries = self._queues.entries(lane)
        queue = self._queues.scheduler_view(lane)  # the same entries, in the same order
        rt = self._settings.runtime
        now, wait = self._clock(), rt.max_batch_wait
        order, bypass = rt.queue_order, rt.max_bypass
        decision = residents.decide_many(
            self._residents(lane), queue, now, wait, order=order, max_bypass=bypass
        )
        if decision.grant:
            self._queues.note_grants(entries, tuple(i for i, _ in decision.grant))
        return self._apply_many(lane, entries, decision)

    def _apply_many(
        self, lane: Lane, entries: list[Entry], decision: residents.ManyDecision
    ) -> bool:
        changed = False
        for runtime in self._in_lane(lane):
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
                evict = self._begin_stop if runtime.unload_requested else self._begin_evict
                changed |= evict(runtime)
        if decision.load is not None:
            spec = next(e.spec for e in entries if e.spec.key == decision.load)
            changed |= self._load_alongside(spec)
        return changed

    def _load_alongside(self, spec: RuntimeSpec) -> bool:
        """Start `spec` once its plan's victims have exited; True when something changed."""
        asleep = self._runtimes.get(spec.key)
        if asleep is not None and asleep.state is not RuntimeState.SLEEPING:
            return False  # loading, ready or leaving: nothing to start
        if self._closing or spec.key in self._oom_held:
            return False
        pending = self._evicting_many.get(spec.key)
        decided = pending is None
        if pending is None:
            try:
                plan = self._plan(spec)
            except MemoryRefusal as exc:  # the budget shrank under a waiting request
                self._queues.fail(spec.key, exc)
                return True
            if not plan.fits:
                return False  # pinned or loading runtimes hold the rest: wait for a change
            since = min(
                (e.enqueued_at for e in self._queues.entries(spec.lane) if e.spec.key == spec.key),
                default=self._clock(),
            )
            victims = frozenset(v.key for v in plan.evict)
            pending = Pending(victims, since, frozenset(k for k in victims if self._asleep(k)))
            self._evicting_many[spec.key] = pending
            for key in pending.asleep:  # in no lane, so no pump stops it: stopped here
                self._begin_stop(self._runtimes[key])
            if pending.victims:  # the load waits for its victims: read its files ahead meanwhile
                resident = [rt.spec for rt in self._runtimes.values()]
                self._loader.read_ahead([spec], resident, self._queues.wants)
        if any(self._holds(key, pending) for key in pending.victims):
            return decided  # victims drain and stop (or sleep); their exit pumps again
        del self._evicting_many[spec.key]
        if asleep is not None:  # woken instead of loaded (router/runtime/sleep.py)
            return self._wake(asleep)
        self._start(spec)
        return True

    def _asleep(self, key: str) -> bool:
        rt = self._runtimes.get(key)
        return rt is not None and rt.state is RuntimeState.SLEEPING and rt.asleep

    def _holds(self, key: str, pending: Pending) -> bool:
        """Does a victim still hold what the plan frees? One that went to sleep for it has
        freed its GPU memory (its weights stay in host RAM, which the sleep itself allowed)."""
        if key not in self._runtimes:
            return False
        return key in pending.asleep or not self._asleep(key)

    def _start(self, spec: RuntimeSpec) -> None:
        runtime = Runtime(spec)
        if not self._book.acts:
            for lane in spec.occupies:
                self._slots[lane] = runtime
        self._runtimes[spec.key] = runtime
        self.spawn_count += 1
        self._spawn(self._load(runtime))

    def _many_deadlines(self) -> list[float]:
        wait = self._settings.runtime.max_batch_wait
        return [
            d
            for lane in Lane
            for d in residents.victim_deadlines(self._residents(lane), wait)
            if any(self._queues.wants(r.key) for r in self._in_lane(lane))
        ]


__all__ = ["ManyLanes"]
