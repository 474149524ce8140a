"""The manager's memory side (issue 25; docs/residency.md): the live ledger, the inputs of
the load decision (router/memory/eviction.py `plan`, which decides) for the dry run and the
real load, and the memory status.

`RuntimeManager` builds on this class; it adds nothing to `RuntimeCore`'s state but the
`Book` (and, for several runtimes per lane, the plans of pending loads: many.py).
"""

from __future__ import annotations

import logging
from typing import Any

from router.config import ModelConfig, evicts
from router.config.availability import missing_files, missing_message
from router.domain import Lane
from router.errors import Conflict, RouterError, ServiceUnavailable
from router.memory.eviction import Plan, refuse_if_too_large
from router.memory.ledger import Ledger
from router.runtime.lifecycle import RuntimeCore
from router.runtime.residency import Pending
from router.runtime.state import Runtime, RuntimeSpec, RuntimeState, primary_lane, spec_for

log = logging.getLogger(__name__)


class Planning(RuntimeCore):
    def _check_open(self) -> None:
        if self._closing:
            raise shutting_down()

    # ---- the live ledger --------------------------------------------------------------

    def live_ledger(self) -> Ledger:
        """Every runtime that holds memory now: loading, ready, stopping, failed and not yet
        exited (the manager drops a runtime only once its process is gone)."""
        return self._book.ledger(
            self._book.resident(rt, self._queues.waiting_for(rt.key))
            for rt in self._runtimes.values()
        )

    async def memory_status(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """({runtime key: {"device", "bytes", "source", "by_device"}}, the `devices` rows)."""
        await self._book.prepare([rt.spec for rt in self._runtimes.values()])
        return self._book.status(self.live_ledger())

    # ---- asking the load decision ----------------------------------------------------

    async def plan(self, config: ModelConfig, lane: Lane | None = None) -> Plan:
        """What loading `config` on `lane` would do now: the dry run (`POST /router/v1/load
        {"dry_run": true}`). Loads, stops and queues nothing."""
        spec = spec_for(config, lane or primary_lane(config))
        self._check_open()
        refuse_missing(spec)
        await self._book.prepare([spec, *(rt.spec for rt in self._runtimes.values())])
        return self._plan(spec)

    def _plan(self, spec: RuntimeSpec) -> Plan:
        ledger = self.live_ledger()
        own = self._runtimes.get(spec.key)
        if own is not None and own.state is RuntimeState.SLEEPING:
            # Waking it brings back all it held: planned as a load, not as resident.
            ledger = ledger.exited(spec.key)
        return self._book.plan(ledger, spec, self._forced(spec))

    def _forced(self, spec: RuntimeSpec) -> dict[str, str]:
        """Runtimes a load of `spec` stops whatever memory says, with the reason."""
        out: dict[str, str] = {}
        # With several runtimes per lane only the policy's lanes are emptied.
        lanes = spec.requires if not self._book.acts else spec.requires - spec.occupies
        for lane in sorted(lanes, key=lambda lane: lane.value):
            for holder in self._runtimes.values():
                if lane not in holder.spec.occupies or holder.key in (spec.key, *out):
                    continue
                if holder.state is RuntimeState.SLEEPING:  # in no lane, holds no device memory
                    continue
                if lane in spec.occupies:
                    out[holder.key] = f"the {lane} lane holds one runtime at a time"
                else:
                    out[holder.key] = f"router_unload_policy of {spec.config.id} names {lane}"
        for rt in self._runtimes.values():
            if rt.key != spec.key and rt.key not in out and self._named_by_policy(spec, rt):
                out[rt.key] = f"router_unload_policy of {spec.config.id} names it"
        return out

    @staticmethod
    def _named_by_policy(spec: RuntimeSpec, rt: Runtime) -> bool:
        if rt.state is RuntimeState.SLEEPING:  # asleep: holds no device memory
            return False
        return evicts(spec.config.unload_triggers, rt.config.id, rt.config.backend_mode)

    def _evicted_lanes(self, spec: RuntimeSpec) -> frozenset[Lane]:
        """Lanes of running runtimes that `family:`/`config:` policy entries name."""
        return frozenset(
            lane
            for rt in self._runtimes.values()
            if rt.key != spec.key and self._named_by_policy(spec, rt)
            for lane in rt.spec.occupies
        )

    # ---- acting on it -----------------------------------------------------------------

    async def _admit(self, spec: RuntimeSpec) -> None:
        """Before any queueing: estimate (off the loop) and refuse what can never fit."""
        refuse_missing(spec)
        if not self._book.acts:
            return  # one runtime per lane: memory decides nothing (no await: arrival order kept)
        # The estimate runs at once, but the request leaves admission (and is queued by the
        # caller, with no await in between) only after every earlier arrival (arrival.py).
        turn = self._arrivals.enter()
        try:
            await self._book.prepare([spec])
            await turn.wait()
            if spec.key not in self._runtimes:
                need, _ = self._book.need(spec)
                refuse_if_too_large(self._book.budgets, spec.config.id, need.devices, need.source)
        finally:
            turn.leave()

    def _oom_retry(self, runtime: Runtime, error: RouterError) -> bool:
        """A load that ran out of memory (`figures.failed` said so and records a raised
        figure): with several runtimes per lane it is retried once, its requests still
        queued, once the raised figure is in the book, so its new plan evicts what that
        figure needs. The failure is recorded as usual, the message saying so."""
        if not self._book.acts or runtime.key in self._oom_retried:
            return False
        self._oom_retried.add(runtime.key)
        self._oom_held.add(runtime.key)
        error.message = (
            f"{error.message} (out of memory: its memory figure is raised and the load "
            "retried once after a further eviction)"
        )
        log.warning("%s ran out of memory while loading: retrying once", runtime.key)
        self._spawn(self._retry_when_settled(runtime.key))
        return True

    async def _retry_when_settled(self, key: str) -> None:
        try:
            await self.figures.settled()
        finally:
            self._oom_held.discard(key)
            self._pump()

    def _free(self, runtime: Runtime | None) -> int | None:
        cap = self._settings.runtime.max_in_flight
        if not cap or runtime is None:
            return None
        return max(0, cap - runtime.leases)

    def _has_room(self, runtime: Runtime) -> bool:
        free = self._free(runtime)
        return free is None or free > 0


def shutting_down() -> ServiceUnavailable:
    return ServiceUnavailable("the router is shutting down", retry_after=5)


def refuse_missing(spec: RuntimeSpec) -> None:
    """A load whose model file is absent fails at once, before any queue or eviction."""
    missing = missing_files(spec.config, spec.occupies)
    if missing:
        config = spec.config
        name = config.image_id if spec.lane is Lane.IMAGE and config.image_id else config.id
        raise Conflict(missing_message(name, missing), code="model_files_missing")


__all__ = ["Pending", "Planning", "refuse_missing", "shutting_down"]
