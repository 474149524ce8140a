"""Leases over the runtime table: a request queued for a runtime (bounded, abandoned when
its client goes), a lease granted and released, the idle unload a release arms, and the
event that tells the graceful stop no lease is held. The manager (manager.py) decides when
to grant at once; the pump (pump.py) grants the queued ones through `grant`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from router.config import ModelConfig, Settings
from router.domain import ANONYMOUS, Caller, Lane, Priority
from router.errors import ServiceUnavailable
from router.runtime import scheduler
from router.runtime.ledger import LiveLedger
from router.runtime.queues import Ticket, Waiter
from router.runtime.state import Lease, Runtime, RuntimeSpec, RuntimeState
from router.runtime.table import Table
from router.tracing import tracer

log = logging.getLogger(__name__)


class Leasing:
    """`changed`: queue lengths or leases changed (the queue board's poke); `run`: the pump
    should look again; `timed`: a lease of a config was held that many seconds."""

    def __init__(
        self,
        settings: Settings,
        table: Table,
        ledger: LiveLedger,
        clock: Callable[[], float] = time.monotonic,
        *,
        changed: Callable[[], None],
        run: Callable[[], None],
        timed: Callable[[str, float], None],
    ) -> None:
        self._settings = settings
        self._table = table
        self._queues = table.queues
        self._ledger = ledger
        self._clock = clock
        self._changed, self._run, self._timed = changed, run, timed
        self.idle = asyncio.Event()  # set while no lease is held (the stop's drain waits on it)
        self.idle.set()
        # Told of every lease that ends (lending's held requests wait for their owner's jobs).
        self.released: list[Callable[[ModelConfig], None]] = []

    async def enqueue(
        self,
        spec: RuntimeSpec,
        lane: Lane,
        arrived: float,
        bound: float,
        setting: str,
        ticket: Ticket | None = None,
        caller: Caller = ANONYMOUS,
    ) -> Lease:
        """Queue a request; `caller`: its class, fairness name and cap (fair.py)."""
        waiting = self._queues.waiting(lane)
        max_queue = self._settings.runtime.max_queue
        if waiting >= max_queue:
            raise ServiceUnavailable(
                f"the {lane} queue is full ({max_queue} waiting)",
                retry_after=scheduler.retry_after(waiting, max_queue),
            )
        future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        waiter = Waiter(spec, arrived, lane, future, trace=tracer().capture(), caller=caller)
        self._queues.add(waiter)
        if ticket is not None:
            ticket.waiter = waiter
        self._run()
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
        self._run()

    def grant(self, runtime: Runtime, arrived: float, caller: Caller = ANONYMOUS) -> Lease:
        runtime.leases += 1
        self._table.take(caller)
        self._ledger.holdings.uses.note(runtime.key)
        granted = self._clock()
        _note_use(runtime, caller, granted)
        runtime.lease_starts.append(granted)  # the ETA's drain: the youngest running request
        self._changed()
        runtime.cancel_idle_timer()
        self.idle.clear()

        def release(held: Runtime) -> None:
            held.lease_starts.remove(granted)
            now = self._clock()
            self._timed(held.config.id, now - granted)
            _note_use(held, caller, now)
            self._table.let_go(caller)
            self._release(held)

        return Lease(runtime, (granted - arrived) * 1000.0, release)

    def _release(self, runtime: Runtime) -> None:
        runtime.leases -= 1
        self._changed()
        for listener in self.released:
            listener(runtime.config)
        runtime.last_release = self._clock()
        if runtime.leases == 0:
            if all(rt.leases == 0 for rt in self._table.runtimes.values()):
                self.idle.set()
            keep = runtime.effective_keep_alive(self._settings.runtime.idle_unload)
            if keep == 0:
                self._idle_unload(runtime)
            elif math.isfinite(keep) and runtime.state is RuntimeState.READY:
                runtime.arm_idle_timer(keep, lambda: self._idle_unload(runtime))
        if runtime.draining or runtime.unload_requested or self._queues.any():
            self._run()

    def _idle_unload(self, runtime: Runtime) -> None:
        wanted = self._queues.wants(runtime.key)
        if runtime.leases == 0 and runtime.state is RuntimeState.READY and not wanted:
            log.info("idle unload of %s", runtime.key)
            runtime.unload_requested = True
            self._run()


def _note_use(runtime: Runtime, caller: Caller, now: float) -> None:
    """An interactive request holds `runtime` now (its guard against batch loads)."""
    if caller.priority is Priority.INTERACTIVE:
        runtime.interactive_at = now
