"""The lifecycle of one runtime: load, ready, failed, parked (vLLM sleep), stopped, each move
with its event (`move`). The manager holds one `Lifecycle` and hands it the runtimes; the
lifecycle tells the manager what happened through the `Owner` protocol, and calls the swap
hooks (router/runtime/hooks.py) at each step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from router.config import Settings
from router.errors import LoadFailed, RouterError, ServiceUnavailable
from router.memory.measure import ReportLines
from router.records import EventBus
from router.records.swap_times import SwapTimes
from router.runtime.hooks import SwapHooks
from router.runtime.load_trace import load_span, staged
from router.runtime.loader import Launched, Loader
from router.runtime.progress import LoadProgress
from router.runtime.state import LoadObserver, ObserverFactory, Runtime, RuntimeState
from router.tracing import NO_SPAN, Parent, Span

log = logging.getLogger(__name__)
LoadErrorSink = Callable[[dict[str, Any]], None]


class Owner(Protocol):
    """What the lifecycle tells the runtimes' owner (the manager)."""

    def ready(self, runtime: Runtime) -> None:
        """Loaded or woken: serve what it was loaded for."""

    def retry(self, runtime: Runtime, error: RouterError) -> bool:
        """Its load ran out of memory: True when the owner retries it (its waiters stay)."""

    def failed(self, runtime: Runtime, error: RouterError) -> None:
        """Its load failed for good: its waiters end with `error`."""

    def parked(self, runtime: Runtime) -> None:
        """It is asleep: its lanes are free."""

    def gone(self, runtime: Runtime) -> None:
        """Its process has exited: it holds nothing any more."""


@dataclass(eq=False)
class Lifecycle:
    """Built by the manager (positional), which then attaches itself as the `Owner`.
    `_on_load_error` records a failed load; `_observer` watches each load (load captures)."""

    _settings: Settings
    _loader: Loader
    _events: EventBus
    _hooks: SwapHooks
    _on_load_error: LoadErrorSink | None = None
    _observer: ObserverFactory | None = None
    _owner: Owner | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    spawn_count: int = field(default=0, init=False)
    # Per config: hook work around a swap, stops (queue ETAs).
    swap_times: SwapTimes = field(default_factory=SwapTimes, init=False)

    def attach(self, owner: Owner) -> None:
        self._owner = owner

    @property
    def owner(self) -> Owner:
        assert self._owner is not None, "the manager attaches itself first"
        return self._owner

    # ---- lifecycle of one runtime ------------------------------------------------------

    def move(self, runtime: Runtime, new: RuntimeState, event: str, **fields: Any) -> bool:
        """Change the state and publish its event in one step. A move the transition table
        forbids from the current state changes nothing and publishes nothing."""
        if not runtime.can_move(new):
            log.debug("%s: %s -> %s refused", runtime.key, runtime.state, new)
            return False
        runtime.transition(new)
        self._events.publish(event, **runtime.identity(), **fields)
        return True

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def start(self, runtime: Runtime, parent: Parent | None = None) -> None:
        """Load `runtime` (created in LOADING, already in the owner's table); `parent`: the
        trace context of the request it is loaded for (load_trace.py)."""
        self.spawn_count += 1
        self.spawn(self._traced_load(runtime, parent))

    async def _traced_load(self, runtime: Runtime, parent: Parent | None) -> None:
        with load_span(runtime, parent) as span:
            await self._load(runtime, span)

    async def _load(self, runtime: Runtime, span: Span = NO_SPAN) -> None:
        self._events.publish("loading", **runtime.identity())  # created in LOADING
        seen = self._observer(runtime) if self._observer else None
        if seen is not None:
            seen.trace_id = span.trace_id
        progress = LoadProgress(staged(self._events.publish, span), runtime.identity())
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
            await seen.ready()
            seen.finished("ok", None, None)
        runtime.attach(launched)
        # KV restore, memory measurement: bounded by their own deadlines; never fail the load.
        started = time.monotonic()
        await self._hooks.after_ready(runtime, launched, report.lines)
        self.swap_times.restore.add(runtime.config.id, time.monotonic() - started)
        moved = self.move(runtime, RuntimeState.READY, "ready", load_seconds=launched.load_seconds)
        assert moved, "only _load moves a loading runtime"
        self.spawn(self._watch_exit(runtime))
        self.owner.ready(runtime)

    def _load_failed(
        self, runtime: Runtime, error: RouterError, seen: LoadObserver | None = None
    ) -> None:
        # Out of memory: its figure is raised (measuring.py) and, with several runtimes per
        # lane, the load retried once after a further eviction, its requests still queued.
        retry = self._hooks.load_failed(runtime, error) and self.owner.retry(runtime, error)
        exit_code, tail = (
            (error.exit_code, list(error.output_tail))
            if isinstance(error, LoadFailed)
            else (None, [])
        )
        attempt_id = seen.attempt_id if seen else None
        self.move(
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
            self.owner.failed(runtime, error)
        self.owner.gone(runtime)

    async def _watch_exit(self, runtime: Runtime) -> None:
        assert runtime.process is not None
        code = await runtime.process.wait_exit()
        self.fail_running(runtime, f"the backend exited with code {code} while serving", code)

    def fail_running(self, runtime: Runtime, reason: str, exit_code: int | None = None) -> None:
        """A ready runtime stopped serving; a stopping one exiting is its stop, not a failure."""
        # No output tail here: a serving backend's log may hold request text (a verbose
        # llama-server prints prompts), and load-time output is what explains a failure.
        failed = self.move(
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
        self.spawn(self._stop_failed(runtime))

    async def _stop_failed(self, runtime: Runtime) -> None:
        try:
            await self.stop_now(runtime)
        except asyncio.CancelledError:
            raise  # close(): the runtime is still listed, so close() stops it
        except Exception:  # a bug must not leave the lane taken forever
            log.exception("stopping the failed runtime %s crashed", runtime.key)
        self.owner.gone(runtime)

    # ---- vLLM sleep instead of stop (router/runtime/sleep.py) ---------------------------

    def begin_evict(self, runtime: Runtime) -> bool:
        """A swap stops the lane's drained runtime; a `router_sleep` one sleeps instead when
        host memory allows (its process stays, the lane is freed once it is asleep)."""
        if self._hooks.parks(runtime):
            if self.move(runtime, RuntimeState.SLEEPING, "sleeping"):
                runtime.cancel_idle_timer()
                self.spawn(self._finish_sleep(runtime))
                return True
        return self.begin_stop(runtime)

    async def _finish_sleep(self, runtime: Runtime) -> None:
        started = time.monotonic()
        asleep = await self._hooks.park(runtime)
        if runtime.state is not RuntimeState.SLEEPING:
            return  # unloaded or dead meanwhile: that path owns it now
        if not asleep:  # refused or too slow: stopped as the swap would have
            self.begin_stop(runtime)
            return
        self.swap_times.sleep.add(runtime.config.id, time.monotonic() - started)
        runtime.asleep = True  # the ledger now counts its weights on the host (holdings.py)
        runtime.drain_requests.clear()  # served again only once woken
        self.owner.parked(runtime)

    def wake(self, runtime: Runtime) -> bool:
        """A sleeping runtime is wanted and its lanes are free: woken instead of loaded."""
        if not self.move(runtime, RuntimeState.LOADING, "loading", woken=True):
            return False
        runtime.asleep, runtime.waking = False, True
        self.spawn(self._finish_wake(runtime))
        return True

    async def _finish_wake(self, runtime: Runtime) -> None:
        started = time.monotonic()
        awake = await self._hooks.unpark(runtime)
        runtime.waking = False
        if runtime.state is not RuntimeState.LOADING:
            return  # its process died meanwhile (_fail_running vacated it)
        if not awake:  # stopped, not failed: its waiters stay queued for a fresh load
            self.move(
                runtime,
                RuntimeState.FAILED,
                "failed",
                reason="vLLM wake_up failed",
                during="wake",
                exit_code=None,
                output_tail=[],
                attempt_id=None,
            )
            await self.stop_now(runtime)
            self.owner.gone(runtime)
            return
        seconds = time.monotonic() - started
        self.swap_times.wake.add(runtime.config.id, seconds)
        self.move(runtime, RuntimeState.READY, "ready", load_seconds=seconds, woken=True)
        self.owner.ready(runtime)

    def begin_stop(self, runtime: Runtime) -> bool:
        if not self.move(runtime, RuntimeState.STOPPING, "unloading"):
            return False
        self.spawn(self._finish_stop(runtime))
        return True

    async def _finish_stop(self, runtime: Runtime) -> None:
        # Drained (no lease) and not yet signalled: save its KV cache, bounded by its deadline.
        # A crash goes through _stop_failed instead and saves nothing.
        model, started = runtime.config.id, time.monotonic()
        await self._hooks.before_stop(runtime)
        stopping = time.monotonic()
        self.swap_times.save.add(model, stopping - started)
        await self.stop_now(runtime)
        self.swap_times.stop.add(model, time.monotonic() - stopping)
        self.move(runtime, RuntimeState.STOPPED, "unloaded")
        self.owner.gone(runtime)

    async def stop_now(self, runtime: Runtime) -> None:
        runtime.cancel_idle_timer()
        if runtime.process is not None:
            await runtime.process.stop(self._settings.runtime.stop_grace)

    async def close(self) -> None:
        """Cancel every task (loads, stops, watches); the owner stops what is left."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["LoadErrorSink", "Lifecycle", "Owner"]
