"""The state the runtime manager owns, and the lifecycle of one runtime in it.

`RuntimeCore` holds the slots, queues and runtimes; its methods move one runtime from loading
to ready, failed or stopped, each move with its event (`_move`). `RuntimeManager` (manager.py)
adds admission, queueing and the pump on top; nothing else subclasses it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from router.config import ModelConfig, Settings
from router.domain import Lane
from router.errors import LoadFailed, RouterError, ServiceUnavailable
from router.memory.measure import ReportLines
from router.records import EventBus
from router.records.request_times import RequestTimes
from router.runtime import scheduler
from router.runtime.activity import ActivityReporter
from router.runtime.arrival import ArrivalOrder
from router.runtime.loader import Launched, Loader
from router.runtime.measuring import FigureHooks, NoFigureHooks
from router.runtime.progress import LoadProgress
from router.runtime.queues import Entry, Queues
from router.runtime.residency import Book, Pending
from router.runtime.state import LoadObserver, ObserverFactory, Runtime, RuntimeState

log = logging.getLogger(__name__)
LoadErrorSink = Callable[[dict[str, Any]], None]


class KvHooks(Protocol):
    """KV persistence (router/runtime/kvcache.py); each call is bounded and never raises."""

    async def restore(self, runtime: Runtime) -> None: ...
    async def save(self, runtime: Runtime) -> None: ...


class SleepHooks(Protocol):
    """vLLM sleep instead of stop (router/runtime/sleep.py); the calls are bounded, never raise."""

    def wanted(self, runtime: Runtime) -> bool: ...
    async def sleep(self, runtime: Runtime) -> bool: ...
    async def wake(self, runtime: Runtime) -> bool: ...


class RuntimeCore:
    def __init__(
        self,
        settings: Settings,
        loader: Loader,
        events: EventBus,
        *,
        on_load_error: LoadErrorSink | None = None,
        observer: ObserverFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        usual_load: Callable[[str], float | None] = lambda _model: None,
        kv: KvHooks | None = None,
        sleep: SleepHooks | None = None,
        figures: FigureHooks | None = None,
    ) -> None:
        self._settings = settings
        self._loader = loader
        self._events = events
        self._on_load_error = on_load_error
        self._observer = observer
        self._clock = clock
        self._kv = kv
        self._sleep = sleep
        self.figures: FigureHooks = figures or NoFigureHooks()  # measured memory (issue 25)
        # The live memory ledger (router/runtime/residency.py, docs/residency.md), and with
        # several runtimes per lane the plan each pending load acts on (many.py).
        self._book = Book(settings, self.figures)
        self._evicting_many: dict[str, Pending] = {}
        self._oom_retried: set[str] = set()  # loads retried once after running out of memory
        self._oom_held: set[str] = set()  # ... and held until their raised figure is recorded
        self._arrivals = ArrivalOrder()  # admission awaits estimates, in arrival order
        self._slots: dict[Lane, Runtime | None] = {lane: None for lane in Lane}
        self._queues = Queues()
        self._runtimes: dict[str, Runtime] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._deadline: asyncio.TimerHandle | None = None
        self._pumping = False
        self._closing = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.spawn_count = 0
        self.request_times = RequestTimes()  # per config: seconds a lease is held (queue ETAs)
        self._usual_load = usual_load  # per config: usual load seconds (LoadTimes; queue ETAs)
        # `queue_position`: positions and ETAs, coalesced like `activity` (waiting_s aside,
        # which changes every instant, an event only when they differ).
        self._positions = ActivityReporter(
            events.publish, self._positions_now, event="queue_position", same=_positions_only
        )
        self._activity = ActivityReporter(events.publish, self._activity_now)
        # Told of every lease that ends (lending's held requests wait for their owner's jobs).
        self.released: list[Callable[[ModelConfig], None]] = []

    def _activity_now(self) -> dict[str, Any]:
        """What the `activity` event carries (docs/events.md)."""
        return {
            "queued": {lane.value: self._queues.waiting(lane) for lane in Lane},
            "in_flight": {key: rt.leases for key, rt in self._runtimes.items()},
        }

    def _positions_now(self) -> dict[str, Any]:
        return {"queue": self.queue_status()}

    def _poke(self) -> None:
        """Queue lengths, leases or states changed: `activity` and `queue_position` soon."""
        self._activity.poke()
        self._positions.poke()

    # ---- what the manager provides ------------------------------------------------------

    def queue_status(self) -> dict[str, list[Any]]:
        raise NotImplementedError

    def _pump(self) -> None:
        raise NotImplementedError

    def _grant_waiters(self, runtime: Runtime, entries: list[Entry]) -> bool:
        raise NotImplementedError

    # ---- lifecycle of one runtime ------------------------------------------------------

    def _move(self, runtime: Runtime, new: RuntimeState, event: str, **fields: Any) -> bool:
        """Change the state and publish its event in one step. A move the transition table
        forbids from the current state changes nothing and publishes nothing."""
        if not runtime.can_move(new):
            log.debug("%s: %s -> %s refused", runtime.key, runtime.state, new)
            return False
        runtime.transition(new)
        self._events.publish(event, **runtime.identity(), **fields)
        return True

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load(self, runtime: Runtime) -> None:
        self._events.publish("loading", **runtime.identity())  # created in LOADING
        # Its estimate (a GGUF header read, up to a second) is read off the loop beside the
        # load: the host room (memory/host.py) reads the ledger on the loop at a later swap,
        # and with `residency: lane` admission estimates nothing.
        self._spawn(self._book.prepare([runtime.spec]))
        seen = self._observer(runtime) if self._observer else None
        progress = LoadProgress(self._events.publish, runtime.identity())
        report = ReportLines()  # the backend's memory report, for the measurement
        try:
            launched: Launched = await self._loader.launch(
                runtime.spec,
                report.tee(progress.tee(seen.output if seen else None)),
                seen.launched if seen else None,
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
        finally:
            progress.close()  # no progress event after the outcome
        if seen:
            seen.finished("ok", None, None)
        runtime.attach(launched)
        if self._kv is not None:  # bounded by its own deadline; never fails the load
            await self._kv.restore(runtime)
        self._oom_retried.discard(runtime.key)
        moved = self._move(runtime, RuntimeState.READY, "ready", load_seconds=launched.load_seconds)
        assert moved, "only _load moves a loading runtime"
        self.figures.loaded(runtime, launched, report.lines)  # measured off the event loop
        self._spawn(self._watch_exit(runtime))
        self._serve_loaded_for(runtime)

    def _serve_loaded_for(self, runtime: Runtime) -> None:
        # First serve the requests this runtime was loaded for (scheduler.loaded_for: without
        # this, a livelock found by R18).
        order = self._settings.runtime.queue_order
        for lane in runtime.spec.occupies:
            entries = self._queues.entries(lane)
            views = self._queues.scheduler_view(lane)
            loaded_for = [entries[i] for i in scheduler.loaded_for(views, runtime.key, order)]
            if loaded_for:
                self._grant_waiters(runtime, loaded_for)
        self._pump()

    def _oom_retry(self, runtime: Runtime, error: RouterError) -> bool:
        return False

    def _load_failed(
        self, runtime: Runtime, error: RouterError, seen: LoadObserver | None = None
    ) -> None:
        # Out of memory: its figure is raised (measuring.py) and, with several runtimes per
        # lane, the load retried once after a further eviction, its requests still queued.
        retry = self.figures.failed(runtime, error) and self._oom_retry(runtime, error)
        exit_code, tail = (
            (error.exit_code, list(error.output_tail))
            if isinstance(error, LoadFailed)
            else (None, [])
        )
        attempt_id = seen.attempt_id if seen else None
        self._move(
            runtime,
            RuntimeState.FAILED,
            "failed",
            reason=error.message,
            during="load",
            exit_code=exit_code,
            output_tail=tail,
            attempt_id=attempt_id,
        )
        runtime.error = error.message
        if seen:
            seen.finished("failed", exit_code, error.message)
        if self._on_load_error:
            self._on_load_error(
                {
                    **runtime.identity(),
                    "backend": runtime.spec.family.value,
                    "reason": error.message,
                    "exit_code": exit_code,
                    "output_tail": tail or None,
                    "attempt_id": attempt_id,
                }
            )
        if not retry:
            self._queues.fail(runtime.key, error)
        self._vacate(runtime)

    async def _watch_exit(self, runtime: Runtime) -> None:
        assert runtime.process is not None
        code = await runtime.process.wait_exit()
        self._fail_running(runtime, f"the backend exited with code {code} while serving", code)

    def _fail_running(self, runtime: Runtime, reason: str, exit_code: int | None = None) -> None:
        """A ready runtime stopped serving; a stopping one exiting is its stop, not a failure."""
        # No output tail here: a serving backend's log may hold request text (a verbose
        # llama-server prints prompts), and load-time output is what explains a failure.
        failed = self._move(
            runtime,
            RuntimeState.FAILED,
            "failed",
            reason=reason,
            during="serving",
            exit_code=exit_code,
            output_tail=[],
            attempt_id=None,
        )
        if not failed:
            return
        runtime.error = reason
        if self._on_load_error:
            self._on_load_error(
                {**runtime.identity(), "backend": runtime.spec.family.value, "reason": reason}
            )
        # The slot stays taken until the process has exited (TERM, grace, KILL): a hung
        # backend and its replacement are never alive together, so memory sized for one copy
        # (a GPU) does not fail the reload. Requests meanwhile queue for the replacement.
        self._spawn(self._stop_failed(runtime))

    async def _stop_failed(self, runtime: Runtime) -> None:
        try:
            await self._stop_now(runtime)
        except asyncio.CancelledError:
            raise  # close(): the runtime is still listed, so close() stops it
        except Exception:  # a bug must not leave the lane taken forever
            log.exception("stopping the failed runtime %s crashed", runtime.key)
        self._vacate(runtime)

    # ---- vLLM sleep instead of stop (router/runtime/sleep.py) ---------------------------

    def _begin_evict(self, runtime: Runtime) -> bool:
        """A swap stops the lane's drained runtime; a `router_sleep` one sleeps instead when
        host memory allows (its process stays, the lane is freed once it is asleep)."""
        if self._sleep is not None and self._sleep.wanted(runtime):
            if self._move(runtime, RuntimeState.SLEEPING, "sleeping"):
                runtime.cancel_idle_timer()
                self._spawn(self._finish_sleep(runtime))
                return True
        return self._begin_stop(runtime)

    async def _finish_sleep(self, runtime: Runtime) -> None:
        assert self._sleep is not None
        asleep = await self._sleep.sleep(runtime)
        if runtime.state is not RuntimeState.SLEEPING:
            return  # unloaded or dead meanwhile: that path owns it now
        if not asleep:  # refused or too slow: stopped as the swap would have
            self._begin_stop(runtime)
            return
        runtime.asleep = True  # the ledger now counts its weights on the host (residency.py)
        runtime.drain_requests.clear()  # served again only once woken
        for lane, holder in self._slots.items():
            if holder is runtime:
                self._slots[lane] = None
        self._pump()

    def _wake(self, runtime: Runtime) -> bool:
        """A sleeping runtime is wanted and its lanes are free: woken instead of loaded."""
        if not self._move(runtime, RuntimeState.LOADING, "loading", woken=True):
            return False
        runtime.asleep = False
        for lane in runtime.spec.occupies:
            self._slots[lane] = runtime
        self._spawn(self._finish_wake(runtime))
        return True

    async def _finish_wake(self, runtime: Runtime) -> None:
        assert self._sleep is not None
        started = time.monotonic()
        awake = await self._sleep.wake(runtime)
        if runtime.state is not RuntimeState.LOADING:
            return  # its process died meanwhile (_fail_running vacated it)
        if not awake:  # stopped, not failed: its waiters stay queued for a fresh load
            self._move(
                runtime,
                RuntimeState.FAILED,
                "failed",
                reason="vLLM wake_up failed",
                during="wake",
                exit_code=None,
                output_tail=[],
                attempt_id=None,
            )
            await self._stop_now(runtime)
            self._vacate(runtime)
            return
        seconds = time.monotonic() - started
        self._move(runtime, RuntimeState.READY, "ready", load_seconds=seconds, woken=True)
        self._serve_loaded_for(runtime)

    def _begin_stop(self, runtime: Runtime) -> bool:
        if not self._move(runtime, RuntimeState.STOPPING, "unloading"):
            return False
        self._spawn(self._finish_stop(runtime))
        return True

    async def _finish_stop(self, runtime: Runtime) -> None:
        # Drained (no lease) and not yet signalled: save its KV cache, bounded by its deadline.
        # A crash goes through _stop_failed instead and saves nothing.
        if self._kv is not None:
            await self._kv.save(runtime)
        await self._stop_now(runtime)
        self._move(runtime, RuntimeState.STOPPED, "unloaded")
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


def _positions_only(event: dict[str, Any]) -> Any:
    """What a `queue_position` change is: the rows without `waiting_s`."""
    return {
        lane: [(r["model"], r["position"], r["eta_s"]) for r in rows]
        for lane, rows in event["queue"].items()
    }
