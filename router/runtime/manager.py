"""The single owner of "what runs where": lanes, leases, swaps, drains and idle unloads
(each runtime's own idle deadline: `Runtime.keep_alive`, `RuntimeView.idle_deadline`).

Callers never read a runtime's state and then act on it; they ask `ensure(config, lane)` and
get a `Lease` (or a clear error), and they decide on `views()`, frozen snapshots. Every state
change happens inside `_pump()`, which asks the pure `scheduler.decide()` what each lane should
do next and applies it, so twenty concurrent requests for a cold model still cause exactly
one spawn; `_move()` changes a state and publishes its event in one step.

A runtime occupies one lane (llama.cpp, sd.cpp, whisper.cpp, vLLM) or several (KoboldCpp serves
every component of its config from one process). Before a runtime loads, every lane it
*requires* (the lanes it occupies plus those named by its `router_unload_policy`) must be empty;
a blocked load leaves a `Claim` in those lanes, which the scheduler treats like a waiter, so
the lane drains and stops its current runtime in the ordinary way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from router.config import ModelConfig
from router.domain import Family, Lane
from router.errors import ServiceUnavailable
from router.runtime import death, eta, scheduler
from router.runtime.many import ManyLanes
from router.runtime.planning import shutting_down
from router.runtime.queues import Claim, Entry, Ticket, Waiter
from router.runtime.state import (
    Lease,
    Runtime,
    RuntimeSpec,
    RuntimeState,
    RuntimeView,
    primary_lane,
    spec_for,
)

log = logging.getLogger(__name__)


class RuntimeManager(ManyLanes):
    """Admission, queueing and the pump over the state `RuntimeCore` owns."""

    # ---- public API -------------------------------------------------------------------

    async def ensure(
        self,
        config: ModelConfig,
        lane: Lane,
        *,
        keep_alive: float | None = None,
        ticket: Ticket | None = None,
    ) -> Lease:
        """A lease on the runtime serving `config` on `lane`, loading it when needed.

        `keep_alive` (seconds, `math.inf` = until unloaded, 0 = right after this request):
        how long the runtime stays loaded once idle, from now on; None keeps what it has
        (Ollama's rule: a request that names no keep_alive does not change it). `ticket`:
        filled in with the waiter if the request queues (its position, `position()`)."""
        spec = spec_for(config, lane)
        self._check_open()
        arrived = self._clock()
        if self._book.acts:  # several per lane: nobody queued for it, and not being evicted
            runtime = self._runtimes.get(spec.key)
            calm = not self._queues.wants(spec.key) and spec.key not in self._victim_since()
        else:
            runtime, calm = self._slots[lane], self._queues.is_empty(lane)
        if (
            runtime is not None
            and runtime.key == spec.key
            and runtime.state is RuntimeState.READY
            and not runtime.draining
            and calm
            and self._has_room(runtime)
        ):
            lease = self._grant(runtime, arrived)
        else:
            await self._admit(spec)
            timeout = self._settings.runtime.queue_timeout
            lease = await self._enqueue(
                spec, lane, arrived, timeout, "runtime.queue_timeout", ticket
            )
        if keep_alive is not None:
            # Held by this lease, so no idle timer runs: the next release arms it anew.
            lease.runtime.keep_alive = keep_alive
        return lease

    @contextlib.asynccontextmanager
    async def lease(self, config: ModelConfig, lane: Lane) -> AsyncIterator[Lease]:
        lease = await self.ensure(config, lane)
        try:
            yield lease
        finally:
            lease.release()

    async def load(self, config: ModelConfig, lane: Lane | None = None) -> RuntimeView:
        """Explicit load (`/router/v1/load`, `startup_model`): ready, then released at once.

        Bounded by how long a swap to this model may take, not by `queue_timeout`: that bounds
        a request's wait for capacity, and cutting a load's caller off with it would leave
        the load going on unseen (docs/decisions.md, "Explicit loads").
        """
        lane = lane or primary_lane(config)
        spec = spec_for(config, lane)
        self._check_open()
        await self._admit(spec)
        rt = self._settings.runtime
        bound = rt.max_batch_wait + rt.stop_grace + rt.load_timeout
        setting = "runtime.max_batch_wait + stop_grace + load_timeout"
        lease = await self._enqueue(spec, lane, self._clock(), bound, setting)
        try:
            return self._view(lease.runtime)
        finally:
            lease.release()

    async def unload(
        self, lanes: frozenset[Lane], *, model: str | None = None, family: Family | None = None
    ) -> list[str]:
        """Stop the runtimes in `lanes` (only those serving config `model`, or of `family`,
        when given) once their running work is done; returns their keys. Chosen and marked in
        one step, so a swap cannot slip in between choosing a runtime and marking it."""
        targets = {
            rt
            for rt in self._runtimes.values()
            if rt.spec.occupies & lanes
            and rt.state is not RuntimeState.SLEEPING
            and model in (None, rt.config.id)
            and family in (None, rt.spec.family)
        }
        sleepers = {  # asleep, so in no lane's slot (router/runtime/sleep.py)
            rt
            for rt in self._runtimes.values()
            if rt.state is RuntimeState.SLEEPING
            and rt.spec.occupies & lanes
            and model in (None, rt.config.id)
            and family in (None, rt.spec.family)
        }
        for runtime in targets:
            runtime.unload_requested = True
        for runtime in sleepers:
            self._begin_stop(runtime)
        targets |= sleepers
        self._pump()
        await asyncio.gather(*(rt.gone.wait() for rt in targets))
        return sorted(rt.key for rt in targets)

    async def expire(self, config: ModelConfig, lane: Lane) -> bool:
        """Ollama's unload (`keep_alive: 0` with nothing to generate): stop the runtime that
        serves `config` on `lane` once its running work is done. Never loads anything; True
        when there was one to stop."""
        runtime = self._runtimes.get(spec_for(config, lane).key)
        if runtime is None:
            return False
        runtime.keep_alive = 0.0
        runtime.unload_requested = True
        if runtime.state is RuntimeState.SLEEPING:  # in no slot: the pump would not see it
            self._begin_stop(runtime)
        self._pump()
        await runtime.gone.wait()
        return True

    def report_failure(self, runtime: Runtime, reason: str) -> None:
        """The proxy saw a backend that no longer serves (R9): kill it; the next request relaunches."""
        self._fail_running(runtime, reason)

    async def confirm_death(self, runtime: Runtime) -> bool:
        """A request failed before any answer: True (and the runtime failed) only when its
        process has really exited (router/runtime/death.py); a live backend keeps serving."""
        code = await death.exit_code(runtime)
        if code is None:
            return False
        self.report_failure(runtime, f"the backend exited with code {code}")
        return True

    # ---- read API: snapshots, never the live objects to decide on -----------------------

    def views(self) -> tuple[RuntimeView, ...]:
        return tuple(self._view(rt) for rt in self._runtimes.values())

    def is_serving(self, runtime: Runtime, *, new_work: bool = False) -> bool:
        """Is this very process still ours and ready? With `new_work`: would it also take a
        new lease now (a draining one serves its running work only, then stops)?"""
        if (
            self._runtimes.get(runtime.key) is not runtime
            or runtime.state is not RuntimeState.READY
        ):
            return False
        return not (new_work and runtime.draining)

    def snapshot(self) -> list[dict[str, Any]]:
        queued = {lane.value: self._queues.waiting(lane) for lane in Lane}
        return [rt.describe(queued) for rt in self._runtimes.values()]

    def status_of(self, config_id: str) -> str:
        states = [rt.state.value for rt in self._runtimes.values() if rt.config.id == config_id]
        return states[0] if states else "unloaded"

    def active_config_ids(self) -> set[str]:
        return {rt.config.id for rt in self._runtimes.values()}

    def queue_length(self, lane: Lane) -> int:
        return self._queues.waiting(lane)

    def queue_status(self) -> dict[str, list[Any]]:
        """Every lane's waiting requests in serve order with position and ETA (status, events)."""
        return {lane.value: [row for _, row in self._ranked(lane)] for lane in Lane}

    def position(self, ticket: Ticket) -> dict[str, Any] | None:
        """The ticket's request's row (position, ETA) while it waits; None once it does not."""
        waiter = ticket.waiter
        if waiter is None or waiter.gone:
            return None
        return next((row for entry, row in self._ranked(waiter.lane) if entry is waiter), None)

    def _ranked(self, lane: Lane) -> list[tuple[Entry, dict[str, Any]]]:
        rt = self._settings.runtime
        policy = eta.Policy(rt.max_batch_wait, rt.queue_order, rt.max_bypass, rt.max_in_flight)
        runtime = self._slots[lane] if not self._book.acts else self._loading_in(lane)
        loading = runtime is not None and runtime.state is RuntimeState.LOADING
        lane_now = eta.LaneNow(
            self._lane_view(lane, runtime),
            runtime.config.id if runtime else None,
            max(0.0, time.time() - runtime.since) if runtime and loading else 0.0,
        )
        entries = self._queues.entries(lane)
        queued = [
            eta.Queued(
                e.spec.key, e.spec.config.id, e.enqueued_at, e.bypassed, isinstance(e, Waiter)
            )
            for e in entries
        ]
        models = {q.model for q in queued} | {lane_now.active_model or ""}
        loads = {m: u for m in models if (u := self._usual_load(m)) is not None}
        per_request = self.request_times.figures()
        ranked = eta.ranked(lane_now, queued, self._clock(), policy, loads, per_request)
        return [(entries[i], row) for i, row in ranked]

    def runtimes(self) -> list[Runtime]:
        """The live objects (process handles for tests and tools); decide on `views()`."""
        return list(self._runtimes.values())

    # ---- shutting down ----------------------------------------------------------------

    def refuse_new_work(self) -> None:
        """Shutdown, phase one: new and queued requests get 503; running work goes on."""
        self._closing = True
        self._queues.refuse_all(shutting_down())

    async def shutdown(self, drain_timeout: float) -> None:
        """Refuse new work, fail queued requests, let running work finish, stop every backend."""
        self.refuse_new_work()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), drain_timeout)
        await self.close()

    async def close(self) -> None:
        self._closing = True
        self._activity.close()
        self._positions.close()
        if self._deadline:
            self._deadline.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(
            *(self._stop_now(rt) for rt in list(self._runtimes.values())), return_exceptions=True
        )

    # ---- queueing ---------------------------------------------------------------------

    def _view(self, runtime: Runtime) -> RuntimeView:
        idle_unload = self._settings.runtime.idle_unload
        last_used = self._book.uses.last(runtime.key)
        return runtime.view(self._queues.waiting_for(runtime.key), idle_unload, last_used)

    async def _enqueue(
        self,
        spec: RuntimeSpec,
        lane: Lane,
        arrived: float,
        bound: float,
        setting: str,
        ticket: Ticket | None = None,
    ) -> Lease:
        waiting = self._queues.waiting(lane)
        max_queue = self._settings.runtime.max_queue
        if waiting >= max_queue:
            raise ServiceUnavailable(
                f"the {lane} queue is full ({max_queue} waiting)",
                retry_after=scheduler.retry_after(waiting, max_queue),
            )
        future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        waiter = Waiter(spec, arrived, lane, future)
        self._queues.add(waiter)
        if ticket is not None:
            ticket.waiter = waiter
        self._pump()
        try:
            return await asyncio.wait_for(asyncio.shield(future), bound or None)
        except TimeoutError:
            self._abandon(waiter)
            raise ServiceUnavailable(
                f"timed out after {bound:g}s waiting for {spec.config.id} ({setting})",
                retry_after=scheduler.retry_after(waiting, max_queue),
            ) from None
        except asyncio.CancelledError:  # the client went away while queued (R23)
            self._abandon(waiter)
            raise

    def _abandon(self, waiter: Waiter) -> None:
        """A waiter gave up; a lease granted in the same instant goes straight back."""
        self._queues.remove(waiter)
        future = waiter.future
        if not future.done():
            future.cancel()
        elif not future.cancelled() and future.exception() is None:
            future.result().release()
        self._pump()

    def _grant(self, runtime: Runtime, arrived: float) -> Lease:
        runtime.leases += 1
        self._book.uses.note(runtime.key)
        self._poke()
        runtime.cancel_idle_timer()
        self._idle.clear()
        granted = self._clock()

        def release(held: Runtime) -> None:
            self.request_times.add(held.config.id, self._clock() - granted)
            self._release(held)

        return Lease(runtime, (granted - arrived) * 1000.0, release)

    def _release(self, runtime: Runtime) -> None:
        runtime.leases -= 1
        self._poke()
        for listener in self.released:
            listener(runtime.config)
        runtime.last_release = self._clock()
        if runtime.leases == 0:
            if all(rt.leases == 0 for rt in self._runtimes.values()):
                self._idle.set()
            keep = runtime.effective_keep_alive(self._settings.runtime.idle_unload)
            if keep == 0:
                self._idle_unload(runtime)
            elif math.isfinite(keep) and runtime.state is RuntimeState.READY:
                runtime.arm_idle_timer(keep, lambda: self._idle_unload(runtime))
        if runtime.draining or runtime.unload_requested or self._queues.any():
            self._pump()

    def _idle_unload(self, runtime: Runtime) -> None:
        wanted = self._queues.wants(runtime.key)
        if runtime.leases == 0 and runtime.state is RuntimeState.READY and not wanted:
            log.info("idle unload of %s", runtime.key)
            runtime.unload_requested = True
            self._pump()

    # ---- the pump: every state change goes through here --------------------------------

    def _pump(self) -> None:
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
        self._poke()  # queue lengths may have changed

    def _lane_view(self, lane: Lane, runtime: Runtime | None) -> scheduler.LaneView:
        return scheduler.LaneView(
            _phase(runtime),
            runtime.key if runtime else None,
            runtime.leases if runtime else 0,
            bool(runtime and lane in runtime.drain_requests),
            self._free(runtime),
        )

    def _pump_lane(self, lane: Lane) -> bool:
        if self._book.acts:
            return self._pump_many(lane)
        runtime = self._slots[lane]
        if runtime is not None and runtime.unload_requested:
            return runtime.leases == 0 and self._begin_stop(runtime)
        entries = self._queues.entries(lane)
        view = self._lane_view(lane, runtime)
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
            self._queues.note_grants(entries, decision.grant)
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
                self._loader.read_ahead(
                    [e.spec for e in entries if e.spec.key != runtime.key],
                    [rt.spec for rt in self._runtimes.values()],
                    self._queues.wants,
                )
            if decision.grant and not runtime.draining:
                changed |= self._grant_waiters(runtime, [entries[i] for i in decision.grant])
            if decision.stop and runtime.leases == 0:
                changed |= self._begin_evict(runtime)  # a stop, or a vLLM sleep (sleep.py)
        if decision.load is not None:
            changed |= self._request_load(
                next(e.spec for e in entries if e.spec.key == decision.load)
            )
        return changed

    def _grant_waiters(self, runtime: Runtime, entries: list[Entry]) -> bool:
        for entry in entries:
            if isinstance(entry, Claim):  # a claim by this very runtime: satisfied
                self._queues.remove(entry)
            elif not entry.future.done():
                entry.future.set_result(self._grant(runtime, entry.enqueued_at))
        return bool(entries)

    def _request_load(self, spec: RuntimeSpec) -> bool:
        asleep = self._runtimes.get(spec.key)
        if asleep is not None and asleep.state is not RuntimeState.SLEEPING:
            asleep = None
        if (spec.key in self._runtimes and asleep is None) or self._closing:
            return False
        added = False
        requires = spec.requires | self._evicted_lanes(spec)
        for lane in requires:
            holder = self._slots[lane]
            if holder is not None and holder.key != spec.key:
                added |= self._queues.claim(lane, spec, self._clock())
        if any(self._slots[lane] is not None for lane in requires):
            return added
        self._queues.drop_claims(spec.key)
        if asleep is not None:  # woken instead of loaded (router/runtime/sleep.py)
            return self._wake(asleep)
        self._start(spec)
        return True

    def _arm_deadline(self) -> None:
        if self._deadline:
            self._deadline.cancel()
            self._deadline = None
        wait = self._settings.runtime.max_batch_wait
        deadlines = [
            d
            for lane in Lane
            if (rt := self._slots[lane]) is not None
            and rt.state is RuntimeState.READY
            and (d := scheduler.next_deadline(self._queues.scheduler_view(lane), rt.key, wait))
            is not None
        ]
        if self._book.acts:
            deadlines += self._many_deadlines()
        if deadlines and not self._closing:
            loop = asyncio.get_running_loop()
            delay = max(0.0, min(deadlines) - self._clock()) + 0.001
            self._deadline = loop.call_later(delay, self._pump)


_MAX_PASSES = 64


def _phase(runtime: Runtime | None) -> scheduler.Phase:
    if runtime is None:
        return scheduler.Phase.EMPTY
    return {
        RuntimeState.LOADING: scheduler.Phase.LOADING,
        RuntimeState.READY: scheduler.Phase.READY,
        RuntimeState.STOPPING: scheduler.Phase.STOPPING,
        RuntimeState.SLEEPING: scheduler.Phase.STOPPING,  # going to sleep: leaving the lane
    }.get(runtime.state, scheduler.Phase.EMPTY)


__all__ = ["Lease", "RuntimeManager", "RuntimeSpec", "RuntimeView", "primary_lane", "spec_for"]
