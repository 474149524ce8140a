"""The single owner of "what runs where": lanes, leases, swaps, drains and idle unloads.

Callers never read a runtime's state and then act on it; they ask `ensure(config, lane)` and
get a `Lease` (or a clear error). Every state change happens inside `_pump()`, which asks the
pure `scheduler.decide()` what each lane should do next and applies it, so twenty concurrent
requests for a cold model still cause exactly one spawn.

A runtime occupies one lane (llama.cpp, sd.cpp, whisper.cpp, vLLM) or several (KoboldCpp serves
every component of its config from one process). Before a runtime loads, every lane it
*requires* (the lanes it occupies plus those named by its `router_unload_policy`) must be empty;
a blocked load leaves a *claim* in those lanes, which the scheduler treats like a waiter, so
the lane drains and stops its current runtime in the ordinary way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from router.config import ModelConfig, Settings, evicts
from router.domain import BackendMode, Lane
from router.errors import LoadFailed, RouterError, ServiceUnavailable
from router.records import EventBus
from router.runtime import scheduler
from router.runtime.loader import Launched, Loader
from router.runtime.state import (
    Lease,
    LoadObserver,
    ObserverFactory,
    Runtime,
    RuntimeSpec,
    RuntimeState,
    Waiter,
    primary_lane,
    spec_for,
)

log = logging.getLogger(__name__)
LoadErrorSink = Callable[[dict[str, Any]], None]


class RuntimeManager:
    def __init__(
        self,
        settings: Settings,
        loader: Loader,
        events: EventBus,
        *,
        on_load_error: LoadErrorSink | None = None,
        observer: ObserverFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._loader = loader
        self._events = events
        self._on_load_error = on_load_error
        self._observer = observer
        self._clock = clock
        self._slots: dict[Lane, Runtime | None] = {lane: None for lane in Lane}
        self._queues: dict[Lane, list[Waiter]] = {lane: [] for lane in Lane}
        self._runtimes: dict[str, Runtime] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._deadline: asyncio.TimerHandle | None = None
        self._pumping = False
        self._closing = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.spawn_count = 0

    # ---- public API -------------------------------------------------------------------

    async def ensure(self, config: ModelConfig, lane: Lane) -> Lease:
        spec = spec_for(config, lane)
        if self._closing:
            raise ServiceUnavailable("the router is shutting down", retry_after=5)
        arrived = self._clock()
        runtime = self._slots[lane]
        if (
            runtime is not None
            and runtime.key == spec.key
            and runtime.state is RuntimeState.READY
            and not runtime.draining
            and not self._queues[lane]
            and self._has_room(runtime)
        ):
            return self._grant(runtime, arrived)
        return await self._enqueue(spec, lane, arrived)

    @contextlib.asynccontextmanager
    async def lease(self, config: ModelConfig, lane: Lane) -> AsyncIterator[Lease]:
        lease = await self.ensure(config, lane)
        try:
            yield lease
        finally:
            lease.release()

    async def load(self, config: ModelConfig, lane: Lane | None = None) -> Runtime:
        """Explicit load (`/router/v1/load`, `startup_model`): ready, then released at once."""
        lane = lane or primary_lane(config)
        async with self.lease(config, lane) as lease:
            return lease.runtime

    async def unload(self, lanes: frozenset[Lane]) -> list[str]:
        """Stop the runtimes in `lanes` once their running work is done; returns their keys."""
        targets = {rt for lane in lanes if (rt := self._slots[lane]) is not None}
        for runtime in targets:
            runtime.unload_requested = True
        self._pump()
        await asyncio.gather(*(rt.gone.wait() for rt in targets))
        return sorted(rt.key for rt in targets)

    def report_failure(self, runtime: Runtime, reason: str) -> None:
        """The proxy saw a backend that no longer serves (R9): kill it; the next request relaunches."""
        if runtime.state is RuntimeState.READY:
            self._fail_running(runtime, reason)

    def snapshot(self) -> list[dict[str, Any]]:
        queued = {lane.value: sum(1 for w in q if w.future) for lane, q in self._queues.items()}
        return [rt.describe(queued) for rt in self._runtimes.values()]

    def status_of(self, config_id: str) -> str:
        states = [rt.state.value for rt in self._runtimes.values() if rt.config.id == config_id]
        return states[0] if states else "unloaded"

    def active_config_ids(self) -> set[str]:
        return {rt.config.id for rt in self._runtimes.values()}

    def queue_length(self, lane: Lane) -> int:
        return sum(1 for w in self._queues[lane] if w.future)

    def runtimes(self) -> list[Runtime]:
        return list(self._runtimes.values())

    def refuse_new_work(self) -> None:
        """Shutdown, phase one: new and queued requests get 503; running work goes on."""
        self._closing = True
        for queue in self._queues.values():
            for waiter in queue:
                if waiter.future and not waiter.future.done():
                    waiter.future.set_exception(
                        ServiceUnavailable("the router is shutting down", retry_after=5)
                    )
            queue.clear()

    async def shutdown(self, drain_timeout: float) -> None:
        """Refuse new work, fail queued requests, let running work finish, stop every backend."""
        self.refuse_new_work()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), drain_timeout)
        await self.close()

    async def close(self) -> None:
        self._closing = True
        if self._deadline:
            self._deadline.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(
            *(self._stop_now(rt) for rt in list(self._runtimes.values())), return_exceptions=True
        )

    # ---- queueing ---------------------------------------------------------------------

    async def _enqueue(self, spec: RuntimeSpec, lane: Lane, arrived: float) -> Lease:
        queue = self._queues[lane]
        waiting = sum(1 for w in queue if w.future)
        max_queue = self._settings.runtime.max_queue
        if waiting >= max_queue:
            raise ServiceUnavailable(
                f"the {lane} queue is full ({max_queue} waiting)",
                retry_after=scheduler.retry_after(waiting, max_queue),
            )
        future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        waiter = Waiter(spec, arrived, future, lane)
        queue.append(waiter)
        self._pump()
        timeout = self._settings.runtime.queue_timeout
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout or None)
        except TimeoutError:
            self._abandon(waiter)
            raise ServiceUnavailable(
                f"timed out after {timeout:g}s waiting for {spec.config.id} (runtime.queue_timeout)",
                retry_after=scheduler.retry_after(waiting, max_queue),
            ) from None
        except asyncio.CancelledError:  # the client went away while queued (R23)
            self._abandon(waiter)
            raise

    def _abandon(self, waiter: Waiter) -> None:
        """A waiter gave up; a lease granted in the same instant goes straight back."""
        with contextlib.suppress(ValueError):
            self._queues[waiter.lane].remove(waiter)
        future = waiter.future
        assert future is not None
        if not future.done():
            future.cancel()
        elif not future.cancelled() and future.exception() is None:
            future.result().release()
        self._pump()

    def _free(self, runtime: Runtime | None) -> int | None:
        cap = self._settings.runtime.max_in_flight
        if not cap or runtime is None:
            return None
        return max(0, cap - runtime.leases)

    def _has_room(self, runtime: Runtime) -> bool:
        free = self._free(runtime)
        return free is None or free > 0

    def _grant(self, runtime: Runtime, arrived: float) -> Lease:
        runtime.leases += 1
        runtime.cancel_idle_timer()
        self._idle.clear()
        return Lease(runtime, (self._clock() - arrived) * 1000.0, self._release)

    def _release(self, runtime: Runtime) -> None:
        runtime.leases -= 1
        runtime.last_release = self._clock()
        if runtime.leases == 0:
            if all(rt.leases == 0 for rt in self._runtimes.values()):
                self._idle.set()
            idle = self._settings.runtime.idle_unload
            if idle > 0 and runtime.state is RuntimeState.READY:
                runtime.arm_idle_timer(idle, lambda: self._idle_unload(runtime))
        if runtime.draining or runtime.unload_requested or any(self._queues.values()):
            self._pump()

    def _idle_unload(self, runtime: Runtime) -> None:
        wanted = any(w.spec.key == runtime.key for q in self._queues.values() for w in q)
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
            for _ in range(64):  # each pass changes something or ends the loop
                if not any([self._pump_lane(lane) for lane in Lane]):
                    break
        finally:
            self._pumping = False
        self._arm_deadline()

    def _pump_lane(self, lane: Lane) -> bool:
        runtime = self._slots[lane]
        queue = self._queues[lane]
        queue[:] = [w for w in queue if w.future is None or not w.future.done()]
        if runtime is not None and runtime.unload_requested:
            if runtime.leases == 0 and runtime.state is RuntimeState.READY:
                self._begin_stop(runtime)
                return True
            return False
        view = scheduler.LaneView(
            _phase(runtime),
            runtime.key if runtime else None,
            runtime.leases if runtime else 0,
            bool(runtime and lane in runtime.drain_requests),
            self._free(runtime),
        )
        waiters = [scheduler.WaiterView(w.spec.key, w.enqueued_at) for w in queue]
        decision = scheduler.decide(
            view, waiters, self._clock(), self._settings.runtime.max_batch_wait
        )
        return self._apply(lane, runtime, queue, decision)

    def _apply(
        self, lane: Lane, runtime: Runtime | None, queue: list[Waiter], decision: scheduler.Decision
    ) -> bool:
        changed = False
        if runtime is not None:
            if decision.undrain and lane in runtime.drain_requests:
                runtime.drain_requests.discard(lane)
                changed = True
            if decision.drain and lane not in runtime.drain_requests:
                runtime.drain_requests.add(lane)
                changed = True
            if decision.grant and not runtime.draining:
                changed |= self._grant_waiters(runtime, [queue[i] for i in decision.grant])
            if decision.stop and runtime.leases == 0 and runtime.state is RuntimeState.READY:
                self._begin_stop(runtime)
                changed = True
        if decision.load is not None:
            changed |= self._request_load(
                next(w.spec for w in queue if w.spec.key == decision.load)
            )
        return changed

    def _grant_waiters(self, runtime: Runtime, waiters: list[Waiter]) -> bool:
        granted = False
        for waiter in waiters:
            if waiter.future is None:  # a claim by this very runtime: satisfied
                self._queues[waiter.lane].remove(waiter)
            elif not waiter.future.done():
                waiter.future.set_result(self._grant(runtime, waiter.enqueued_at))
            granted = True
        return granted

    def _request_load(self, spec: RuntimeSpec) -> bool:
        if spec.key in self._runtimes or self._closing:
            return False
        added = False
        requires = spec.requires | self._evicted_lanes(spec)
        for lane in requires:
            holder = self._slots[lane]
            if holder is not None and holder.key != spec.key:
                if not any(w.future is None and w.spec.key == spec.key for w in self._queues[lane]):
                    self._queues[lane].insert(0, Waiter(spec, self._clock(), None, lane))
                    added = True
        if any(self._slots[lane] is not None for lane in requires):
            return added
        for queue in self._queues.values():
            queue[:] = [w for w in queue if not (w.future is None and w.spec.key == spec.key)]
        runtime = Runtime(spec)
        for lane in spec.occupies:
            self._slots[lane] = runtime
        self._runtimes[spec.key] = runtime
        self.spawn_count += 1
        self._spawn(self._load(runtime))
        return True

    def _evicted_lanes(self, spec: RuntimeSpec) -> frozenset[Lane]:
        """Lanes of running runtimes that `family:`/`config:` policy entries name."""
        triggers = spec.config.unload_triggers
        return frozenset(
            lane
            for rt in self._runtimes.values()
            if rt.key != spec.key and evicts(triggers, rt.config.id, rt.config.backend_mode)
            for lane in rt.spec.occupies
        )

    def _arm_deadline(self) -> None:
        if self._deadline:
            self._deadline.cancel()
            self._deadline = None
        wait = self._settings.runtime.max_batch_wait
        deadlines = [
            d
            for lane, queue in self._queues.items()
            if (rt := self._slots[lane]) is not None
            and rt.state is RuntimeState.READY
            and (
                d := scheduler.next_deadline(
                    [scheduler.WaiterView(w.spec.key, w.enqueued_at) for w in queue], rt.key, wait
                )
            )
            is not None
        ]
        if deadlines and not self._closing:
            loop = asyncio.get_running_loop()
            delay = max(0.0, min(deadlines) - self._clock()) + 0.001
            self._deadline = loop.call_later(delay, self._pump)

    # ---- lifecycle of one runtime ------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load(self, runtime: Runtime) -> None:
        self._events.publish("loading", **runtime.identity())
        seen = self._observer(runtime) if self._observer else None
        try:
            launched: Launched = await self._loader.launch(
                runtime.spec, seen.output if seen else None, seen.launched if seen else None
            )
        except RouterError as exc:
            self._load_failed(runtime, exc, seen)
            return
        except asyncio.CancelledError:
            error = ServiceUnavailable("load cancelled: the router is stopping")
            self._load_failed(runtime, error, seen)
            raise
        except Exception as exc:  # a bug must not leave the lane stuck in "loading"
            log.exception("load of %s crashed", runtime.key)
            self._load_failed(
                runtime, LoadFailed(f"load of {runtime.config.id} failed: {exc}"), seen
            )
            return
        if seen:
            seen.finished("ok", None, None)
        runtime.attach(launched)
        runtime.transition(RuntimeState.READY)
        self._events.publish("ready", **runtime.identity(), load_seconds=launched.load_seconds)
        self._spawn(self._watch_exit(runtime))
        # First serve the requests this runtime was loaded for. They queued before it was
        # ready, so the batch window of a later waiter for another model may have expired
        # meanwhile; scheduler.decide() would then stop the new runtime unused and load it
        # again for the same waiters, forever (a livelock found by R18).
        for lane in runtime.spec.occupies:
            loaded_for = [w for w in self._queues[lane] if w.spec.key == runtime.key]
            if loaded_for:
                self._grant_waiters(runtime, loaded_for)
        self._pump()

    def _load_failed(
        self, runtime: Runtime, error: RouterError, seen: LoadObserver | None = None
    ) -> None:
        runtime.transition(RuntimeState.FAILED)
        runtime.error = error.message
        exit_code = getattr(error, "exit_code", None)
        self._events.publish("failed", **runtime.identity(), reason=error.message)
        if seen:
            seen.finished("failed", exit_code, error.message)
        if self._on_load_error:
            self._on_load_error(
                {
                    **runtime.identity(),
                    "backend": runtime.spec.family.value,
                    "reason": error.message,
                    "exit_code": exit_code,
                    "output_tail": getattr(error, "output_tail", None),
                    "attempt_id": seen.attempt_id if seen else None,
                }
            )
        for queue in self._queues.values():
            for waiter in list(queue):
                if waiter.spec.key == runtime.key:
                    queue.remove(waiter)
                    if waiter.future and not waiter.future.done():
                        waiter.future.set_exception(error)
        self._vacate(runtime)

    async def _watch_exit(self, runtime: Runtime) -> None:
        assert runtime.process is not None
        code = await runtime.process.wait_exit()
        if runtime.state is RuntimeState.READY:
            self._fail_running(runtime, f"the backend exited with code {code} while serving")

    def _fail_running(self, runtime: Runtime, reason: str) -> None:
        runtime.transition(RuntimeState.FAILED)
        runtime.error = reason
        self._events.publish("failed", **runtime.identity(), reason=reason)
        if self._on_load_error:
            self._on_load_error(
                {**runtime.identity(), "backend": runtime.spec.family.value, "reason": reason}
            )
        self._spawn(self._stop_now(runtime))
        self._vacate(runtime)

    def _begin_stop(self, runtime: Runtime) -> None:
        runtime.transition(RuntimeState.STOPPING)
        self._events.publish("unloading", **runtime.identity())
        self._spawn(self._finish_stop(runtime))

    async def _finish_stop(self, runtime: Runtime) -> None:
        await self._stop_now(runtime)
        if runtime.state is RuntimeState.STOPPING:
            runtime.transition(RuntimeState.STOPPED)
        self._events.publish("unloaded", **runtime.identity())
        self._vacate(runtime)

    async def _stop_now(self, runtime: Runtime) -> None:
        runtime.cancel_idle_timer()
        if runtime.process is not None:
            await runtime.process.stop(self._settings.runtime.stop_grace)

    def _vacate(self, runtime: Runtime) -> None:
        for lane, holder in self._slots.items():
            if holder is runtime:
                self._slots[lane] = None
        if self._runtimes.get(runtime.key) is runtime:
            del self._runtimes[runtime.key]
        runtime.gone.set()
        self._pump()


def _phase(runtime: Runtime | None) -> scheduler.Phase:
    if runtime is None:
        return scheduler.Phase.EMPTY
    return {
        RuntimeState.LOADING: scheduler.Phase.LOADING,
        RuntimeState.READY: scheduler.Phase.READY,
        RuntimeState.STOPPING: scheduler.Phase.STOPPING,
    }.get(runtime.state, scheduler.Phase.EMPTY)


__all__ = ["Lease", "RuntimeManager", "RuntimeSpec", "spec_for", "primary_lane", "BackendMode"]
