"""The single owner of "what runs where": lanes, leases, swaps, drains and idle unloads
(each runtime's own idle deadline: `Runtime.keep_alive`, `RuntimeView.idle_deadline`).

Callers never read a runtime's state and then act on it; they ask `ensure(config, lane)` and
get a `Lease` (or a clear error), and they decide on `views()`, frozen snapshots. Every state
change happens inside the pump (pump.py), which asks the one pure decision (`policy.decide()`)
what each lane should do next and applies it, so twenty concurrent requests for a cold model
still cause exactly one spawn; the lifecycle's `move()` changes a state and publishes its
event in one step.

A runtime occupies one lane (llama.cpp, sd.cpp, whisper.cpp, vLLM) or several (KoboldCpp serves
every component of its config from one process). Before a runtime loads, the runtimes its plan
names (ledger.py: with one runtime per lane, every runtime in the lanes it *requires*, those it
occupies plus those named by its `router_unload_policy`) must be gone; they are its victims,
which drain and stop in the ordinary way once their batch window closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from router.config import ModelConfig, Settings
from router.domain import ANONYMOUS, Caller, Family, Lane
from router.errors import RouterError
from router.memory.eviction import Plan
from router.memory.ledger import Ledger
from router.records import EventBus
from router.runtime import death
from router.runtime.board import QueueBoard
from router.runtime.hooks import SwapHook, SwapHooks
from router.runtime.leasing import Leasing
from router.runtime.ledger import LiveLedger, shutting_down
from router.runtime.lifecycle import Lifecycle, LoadErrorSink
from router.runtime.load_trace import queue_span
from router.runtime.loader import Loader
from router.runtime.measuring import FigureHooks, NoFigureHooks
from router.runtime.pump import Pump
from router.runtime.queues import Ticket
from router.runtime.state import (
    Lease,
    ObserverFactory,
    Runtime,
    RuntimeSpec,
    RuntimeState,
    RuntimeView,
    primary_lane,
    spec_for,
)
from router.runtime.table import Table
from router.runtime.unloads import Unloads

log = logging.getLogger(__name__)


class RuntimeManager:
    """Admission, queueing and the public face over its parts: the table it owns (runtimes,
    queues), the live ledger, the lifecycle of each runtime, the pump, the queue board and the
    swap hooks. `usual_load` (per config, LoadTimes) feeds the queue ETAs."""

    def __init__(
        self,
        settings: Settings,
        loader: Loader,
        events: EventBus,
        *,
        hooks: Iterable[SwapHook] | SwapHooks = (),
        figures: FigureHooks | None = None,
        on_load_error: LoadErrorSink | None = None,
        observer: ObserverFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        usual_load: Callable[[str], float | None] = lambda _model: None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._hooks = hooks if isinstance(hooks, SwapHooks) else SwapHooks(hooks)
        self.figures: FigureHooks = figures or NoFigureHooks()  # measured memory (issue 25)
        self._table = Table(settings)
        self._queues = self._table.queues
        self.ledger = LiveLedger(settings, self._table, self.figures)
        self._life = Lifecycle(settings, loader, events, self._hooks, on_load_error, observer)
        self._life.attach(self)
        self._leasing = Leasing(
            settings,
            self._table,
            self.ledger,
            clock,
            changed=self._poke,
            run=lambda: self._pump.run(),
            timed=lambda config_id, held: self.request_times.add(config_id, held),
        )
        self._pump = Pump(
            settings,
            self._table,
            self.ledger,
            self._life,
            self._hooks,
            clock,
            self._leasing.grant,
            self._poke,
        )
        self._unloads = Unloads(self._table, self._life, self._pump.run)
        swaps = (self._life.swap_times, self._hooks)
        self._board = QueueBoard(
            settings, self._table, self._pump, events, clock, usual_load, swaps
        )
        self.request_times = self._board.request_times
        # Told of every lease that ends (lending's held requests wait for their owner's jobs).
        self.released = self._leasing.released

    @property
    def spawn_count(self) -> int:
        return self._life.spawn_count

    def _poke(self) -> None:
        """Queue lengths, leases or states changed: `activity` and `queue_position` soon."""
        self._board.poke()

    def _check_open(self) -> None:
        if self._table.closing:
            raise shutting_down()

    # ---- what the lifecycle tells its owner (lifecycle.Owner) ---------------------------

    def ready(self, runtime: Runtime) -> None:
        self.ledger.loaded(runtime.key)
        self._pump.serve_loaded_for(runtime)

    def retry(self, runtime: Runtime, error: RouterError) -> bool:
        return self.ledger.retry(runtime, error, self._life.spawn, self._pump.run)

    def failed(self, runtime: Runtime, error: RouterError) -> None:
        self._queues.fail(runtime.key, error)

    def parked(self, runtime: Runtime) -> None:
        self._pump.run()

    def gone(self, runtime: Runtime) -> None:
        self._table.drop(runtime)
        self._hooks.gone(runtime)
        self._pump.run()

    # ---- memory lent over RPC (router/cluster/pooled/lender.py's LentMemory) ----------------

    def lend(self, key: str, model: str, device: str, size: int) -> None:
        self.ledger.lend(key, model, device, size)

    def unlend(self, key: str) -> None:
        """A lease ended: its bytes are free, so a load waiting for them may start now (the
        pump runs on runtime events only; nothing else would wake it)."""
        self.ledger.unlend(key)
        self._pump.run()

    def free(self, device: str) -> int:
        return self.ledger.free(device)

    @property
    def hooks(self) -> SwapHooks:
        return self._hooks

    # ---- public API -------------------------------------------------------------------

    async def ensure(
        self,
        config: ModelConfig,
        lane: Lane,
        *,
        keep_alive: float | None = None,
        ticket: Ticket | None = None,
        caller: Caller = ANONYMOUS,
    ) -> Lease:
        """A lease on the runtime serving `config` on `lane`, loading it when needed.

        `keep_alive` (seconds, `math.inf` = until unloaded, 0 = right after this request):
        how long the runtime stays loaded once idle, from now on; None keeps what it has
        (Ollama's rule: a request that names no keep_alive does not change it). `ticket`:
        filled in with the waiter if the request queues (its position, `position()`).
        `caller`: who sent it (its class, fairness name and cap: router/runtime/fair.py)."""
        spec = spec_for(config, lane)
        self._check_open()
        arrived = self._clock()
        # Granted at once when nobody is queued for it and no waiting load stops it.
        runtime = self._table.runtimes.get(spec.key)
        calm = not self._queues.wants(spec.key) and spec.key not in self._pump.victim_since()
        if (
            runtime is not None
            and runtime.key == spec.key
            and runtime.state is RuntimeState.READY
            and not runtime.draining
            and calm
            and self._table.has_room(runtime)
            and self._table.under_cap(caller)
        ):
            lease = self._leasing.grant(runtime, arrived, caller)
        else:
            with queue_span(spec):  # a lease granted at once has none: nothing waited
                await self.ledger.admit(spec)
                timeout = self._settings.runtime.queue_timeout
                lease = await self._leasing.enqueue(
                    spec, lane, arrived, timeout, "runtime.queue_timeout", ticket, caller
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
        await self.ledger.admit(spec)
        rt = self._settings.runtime
        bound = rt.max_batch_wait + rt.stop_grace + rt.load_timeout
        setting = "runtime.max_batch_wait + stop_grace + load_timeout"
        lease = await self._leasing.enqueue(spec, lane, self._clock(), bound, setting)
        try:
            return self._view(lease.runtime)
        finally:
            lease.release()

    async def unload(
        self, lanes: frozenset[Lane], *, model: str | None = None, family: Family | None = None
    ) -> list[str]:
        """Stop the runtimes in `lanes` (only those serving config `model`, or of `family`,
        when given) once their running work is done; returns their keys (router/runtime/
        unloads.py)."""
        return await self._unloads.unload(lanes, model, family)

    async def expire(self, config: ModelConfig, lane: Lane) -> bool:
        """Ollama's unload (`keep_alive: 0` with nothing to generate): stop the runtime that
        serves `config` on `lane` once its running work is done. Never loads anything; True
        when there was one to stop."""
        return await self._unloads.expire(config, lane)

    def report_failure(self, runtime: Runtime, reason: str) -> None:
        """The proxy saw a backend that no longer serves (R9): kill it; the next request relaunches."""
        self._life.fail_running(runtime, reason)

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
        return tuple(self._view(rt) for rt in self._table.runtimes.values())

    def is_serving(self, runtime: Runtime, *, new_work: bool = False) -> bool:
        """Is this very process still ours and ready? With `new_work`: would it also take a
        new lease now (a draining one serves its running work only, then stops)?"""
        if (
            self._table.runtimes.get(runtime.key) is not runtime
            or runtime.state is not RuntimeState.READY
        ):
            return False
        return not (new_work and runtime.draining)

    def snapshot(self) -> list[dict[str, Any]]:
        queued = {lane.value: self._queues.waiting(lane) for lane in Lane}
        return [rt.describe(queued) for rt in self._table.runtimes.values()]

    def status_of(self, config_id: str) -> str:
        states = [
            rt.state.value for rt in self._table.runtimes.values() if rt.config.id == config_id
        ]
        return states[0] if states else "unloaded"

    def active_config_ids(self) -> set[str]:
        return {rt.config.id for rt in self._table.runtimes.values()}

    def queue_length(self, lane: Lane) -> int:
        return self._queues.waiting(lane)

    def queue_status(self) -> dict[str, list[Any]]:
        """Every lane's waiting requests in serve order with position and ETA (status, events)."""
        return self._board.queue_status()

    def position(self, ticket: Ticket) -> dict[str, Any] | None:
        """The ticket's request's row (position, ETA) while it waits; None once it does not."""
        return self._board.position(ticket)

    def runtimes(self) -> list[Runtime]:
        """The live objects (process handles for tests and tools); decide on `views()`."""
        return list(self._table.runtimes.values())

    # ---- shutting down ----------------------------------------------------------------

    def refuse_new_work(self) -> None:
        """Shutdown, phase one: new and queued requests get 503; running work goes on."""
        self._table.closing = True
        self._queues.refuse_all(shutting_down())

    async def shutdown(self, drain_timeout: float) -> None:
        """Refuse new work, fail queued requests, let running work finish, stop every backend."""
        self.refuse_new_work()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._leasing.idle.wait(), drain_timeout)
        await self._save_before_exit()
        await self.close()

    async def _save_before_exit(self) -> None:
        """Every idle ready runtime gets its stop hooks (the KV save of its conversations) at
        once, all within `runtime.kv_shutdown_timeout` (docs/swaps.md, "Restarts")."""
        idle = [
            rt
            for rt in self._table.runtimes.values()
            if rt.state is RuntimeState.READY and rt.leases == 0
        ]
        if not idle or self._hooks.empty:
            return
        saves = asyncio.gather(*(self._hooks.before_stop(rt) for rt in idle))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(saves, self._settings.runtime.kv_shutdown_timeout)

    async def close(self) -> None:
        self._table.closing = True
        self._board.close()
        self._pump.close()
        await self._life.close()
        await asyncio.gather(
            *(self._life.stop_now(rt) for rt in list(self._table.runtimes.values())),
            return_exceptions=True,
        )

    # ---- a runtime's snapshot (queueing and leases: leasing.py) -------------------------

    def _view(self, runtime: Runtime) -> RuntimeView:
        idle_unload = self._settings.runtime.idle_unload
        last_used = self.ledger.holdings.uses.last(runtime.key)
        return runtime.view(self._queues.waiting_for(runtime.key), idle_unload, last_used)

    # ---- the memory side (router/runtime/ledger.py) ------------------------------------

    async def plan(self, config: ModelConfig, lane: Lane | None = None) -> Plan:
        """The dry run of a load (`POST /router/v1/load {"dry_run": true}`)."""
        self._check_open()
        return await self.ledger.dry_run(config, lane)

    def live_ledger(self) -> Ledger:
        return self.ledger.ledger()

    async def memory_status(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        return await self.ledger.memory_status()

    def memory_now(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        return self.ledger.memory_now()


__all__ = ["Lease", "RuntimeManager", "RuntimeSpec", "RuntimeView", "primary_lane", "spec_for"]
