"""The manager's memory side (issue 25; docs/residency.md): the live ledger over the manager's
table, the inputs of the load decision (router/memory/eviction.py `plan`, which decides) for
the dry run and the real load, each load's victims, admission's size check, the retry of a
load that ran out of memory, and the memory status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from router.config import ModelConfig, Settings, evicts
from router.config.availability import missing_files, missing_message
from router.domain import Lane
from router.errors import Conflict, RouterError, ServiceUnavailable
from router.memory.eviction import Plan, lent_to_reclaim, refuse_if_too_large
from router.memory.ledger import Ledger, Resident
from router.runtime.arrival import ArrivalOrder
from router.runtime.holdings import Holdings
from router.runtime.measuring import FigureHooks
from router.runtime.state import Runtime, RuntimeSpec, RuntimeState, primary_lane, spec_for
from router.runtime.table import Table

log = logging.getLogger(__name__)
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class LiveLedger:
    def __init__(self, settings: Settings, table: Table, figures: FigureHooks) -> None:
        self._table = table
        self.figures = figures
        self.holdings = Holdings(settings, figures)
        self._arrivals = ArrivalOrder()  # admission awaits estimates, in arrival order
        self._oom_retried: set[str] = set()  # loads retried once after running out of memory
        self.oom_held: set[str] = set()  # ... and held until their raised figure is recorded
        # Memory this node lends to another's model over RPC (docs/cluster.md, "Pooled
        # memory"): pinned, never a victim, counted like a runtime until the lease ends.
        self.lent: dict[str, Resident] = {}
        # Set at wiring (router/app.py): the lender, handed the lent keys a waiting load needs.
        self.reclaim_lent: Callable[[frozenset[str]], None] | None = None

    # ---- the live ledger --------------------------------------------------------------

    def ledger(self) -> Ledger:
        """Every runtime that holds memory now: loading, ready, stopping, failed and not yet
        exited (the manager drops a runtime only once its process is gone)."""
        waiting_for = self._table.queues.waiting_for
        return self.holdings.ledger(
            [
                *(
                    self.holdings.resident(rt, waiting_for(rt.key))
                    for rt in self._table.runtimes.values()
                ),
                *self.lent.values(),
            ]
        )

    def lend(self, key: str, model: str, device: str, size: int) -> None:
        """Count `size` bytes on `device` as held by a lease (its RPC server's tensors)."""
        self.lent[key] = Resident(key, model, "rpc", {device: size}, busy=True, pinned=True)

    def unlend(self, key: str) -> None:
        self.lent.pop(key, None)

    def free(self, device: str) -> int:
        return self.ledger().free(device)

    def room_for(self, key: str, device: str = "host") -> int:
        """Free bytes on `device` as if runtime `key` held nothing (its own load's share)."""
        return self.ledger().exited(key).free(device)

    async def memory_status(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """({runtime key: {"device", "bytes", "source", "by_device"}}, the `devices` rows)."""
        await self.holdings.prepare([rt.spec for rt in self._table.runtimes.values()])
        return self.holdings.status(self.ledger())

    def memory_now(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """`memory_status()` of this very moment, without waiting (GET /router/v1/status): a
        runtime whose estimate is still being read (in the background, started here) is left
        out until it is known, instead of holding the answer."""
        runtimes = list(self._table.runtimes.values())
        self.holdings.refresh(rt.spec for rt in runtimes)
        waiting_for = self._table.queues.waiting_for
        return self.holdings.status(
            self.holdings.ledger(
                [
                    *(
                        self.holdings.resident(rt, waiting_for(rt.key))
                        for rt in runtimes
                        if self.holdings.cached(rt.spec)
                    ),
                    *self.lent.values(),
                ]
            )
        )

    # ---- the load plan ----------------------------------------------------------------

    async def dry_run(self, config: ModelConfig, lane: Lane | None = None) -> Plan:
        """What loading `config` on `lane` would do now: the dry run (`POST /router/v1/load
        {"dry_run": true}`). Loads, stops and queues nothing."""
        spec = spec_for(config, lane or primary_lane(config))
        refuse_missing(spec)
        await self.holdings.prepare([spec, *(rt.spec for rt in self._table.runtimes.values())])
        plan = self.plan(spec)
        # A load that cannot start yet asks back what this node lends (`ask_back`): the
        # dry run names those leases, by the same choice.
        return plan if plan.fits else replace(plan, reclaim=self.lent_needed(spec))

    def plan(self, spec: RuntimeSpec) -> Plan:
        return self.holdings.plan(self._ledger_for(spec), spec, self._forced(spec))

    def _ledger_for(self, spec: RuntimeSpec) -> Ledger:
        ledger = self.ledger()
        own = self._table.runtimes.get(spec.key)
        if own is not None and own.state is RuntimeState.SLEEPING:
            # Waking it brings back all it held: planned as a load, not as resident.
            ledger = ledger.exited(spec.key)
        return ledger

    def ask_back(self, spec: RuntimeSpec) -> None:
        """`spec` cannot start yet: when memory this node lends over RPC holds what it lacks,
        the lender asks those leases back (docs/cluster.md, "The lending node's own need")."""
        if self.reclaim_lent is None:
            return
        keys = self.lent_needed(spec)
        if keys:
            self.reclaim_lent(frozenset(keys))

    def lent_needed(self, spec: RuntimeSpec) -> tuple[str, ...]:
        """The lent residents (`rpc:<lease id>`, largest first) whose leaving lets a load of
        `spec` that cannot start yet fit; none with one runtime per lane (memory decides
        nothing there). The real load and its dry run both ask this."""
        if not self.lent or not self._table.by_memory:
            return ()
        forced = self._forced(spec)

        def fits(ledger: Ledger) -> bool:
            return self.holdings.plan(ledger, spec, forced).fits

        keys = lent_to_reclaim(self._ledger_for(spec), self.lent.values(), fits)
        return tuple(sorted(keys, key=lambda key: (-self.lent[key].total, key)))

    def victims(self, spec: RuntimeSpec) -> frozenset[str] | None:
        """The runtimes that must be gone before `spec` starts; None: it cannot start yet
        (pinned or loading runtimes hold the memory it needs). Raises MemoryRefusal when it
        can never fit. With one runtime per lane, memory decides nothing: every runtime in a
        lane it needs (its own, and those `router_unload_policy` names) goes first, whatever
        its state, so a hung backend and its replacement are never alive together."""
        if self._table.by_memory:
            plan = self.plan(spec)
            return frozenset(v.key for v in plan.evict) if plan.fits else None
        runtimes = [rt for rt in self._table.runtimes.values() if rt.key != spec.key]
        named = {lane for rt in runtimes if named_by_policy(spec, rt) for lane in rt.spec.occupies}
        lanes = spec.requires | named
        return frozenset(
            rt.key
            for rt in runtimes
            if rt.spec.occupies & lanes and rt.state is not RuntimeState.SLEEPING
        )

    def _forced(self, spec: RuntimeSpec) -> dict[str, str]:
        """Runtimes a load of `spec` stops whatever memory says, with the reason."""
        out: dict[str, str] = {}
        runtimes = self._table.runtimes.values()
        # With several runtimes per lane only the policy's lanes are emptied.
        lanes = spec.requires if not self._table.by_memory else spec.requires - spec.occupies
        for lane in sorted(lanes, key=lambda lane: lane.value):
            for holder in runtimes:
                if lane not in holder.spec.occupies or holder.key in (spec.key, *out):
                    continue
                if holder.state is RuntimeState.SLEEPING:  # in no lane, holds no device memory
                    continue
                if lane in spec.occupies:
                    out[holder.key] = f"the {lane} lane holds one runtime at a time"
                else:
                    out[holder.key] = f"router_unload_policy of {spec.config.id} names {lane}"
        for rt in runtimes:
            if rt.key != spec.key and rt.key not in out and named_by_policy(spec, rt):
                out[rt.key] = f"router_unload_policy of {spec.config.id} names it"
        return out

    # ---- admission and the out-of-memory retry ------------------------------------------

    async def admit(self, spec: RuntimeSpec) -> None:
        """Before any queueing: estimate (off the loop) and refuse what can never fit."""
        refuse_missing(spec)
        if not self._table.by_memory:
            return  # one runtime per lane: memory decides nothing (no await: arrival order kept)
        # The estimate runs at once, but the request leaves admission (and is queued by the
        # caller, with no await in between) only after every earlier arrival (arrival.py).
        turn = self._arrivals.enter()
        try:
            await self.holdings.prepare([spec])
            await turn.wait()
            if spec.key not in self._table.runtimes:
                need = self.holdings.load_need(self.ledger(), spec)
                refuse_if_too_large(
                    self.holdings.budgets, spec.config.id, need.devices, need.source
                )
        finally:
            turn.leave()

    def retry(
        self, runtime: Runtime, error: RouterError, spawn: Spawn, pump: Callable[[], None]
    ) -> bool:
        """A load that ran out of memory (its figure is being raised): with several runtimes
        per lane it is retried once, its requests still queued, once the raised figure is in
        the figure book, so its new plan evicts what that figure needs. The failure is recorded as
        usual, the message saying so."""
        if not self._table.by_memory or runtime.key in self._oom_retried:
            return False
        self._oom_retried.add(runtime.key)
        self.oom_held.add(runtime.key)
        error.message = (
            f"{error.message} (out of memory: its memory figure is raised and the load "
            "retried once after a further eviction)"
        )
        log.warning("%s ran out of memory while loading: retrying once", runtime.key)
        spawn(self._release_when_settled(runtime.key, pump))
        return True

    async def _release_when_settled(self, key: str, pump: Callable[[], None]) -> None:
        try:
            await self.figures.settled()
        finally:
            self.oom_held.discard(key)
            pump()

    def loaded(self, key: str) -> None:
        """A load succeeded: a later out-of-memory failure may be retried again."""
        self._oom_retried.discard(key)


def named_by_policy(spec: RuntimeSpec, rt: Runtime) -> bool:
    """Does `router_unload_policy` of `spec` name the (non-sleeping) runtime `rt`?"""
    if rt.state is RuntimeState.SLEEPING:  # asleep: holds no device memory
        return False
    return evicts(spec.config.unload_triggers, rt.config.id, rt.config.backend_mode)


def shutting_down() -> ServiceUnavailable:
    return ServiceUnavailable("the router is shutting down", retry_after=5)


def refuse_missing(spec: RuntimeSpec) -> None:
    """A load whose model file is absent fails at once, before any queue or eviction."""
    missing = missing_files(spec.config, spec.occupies)
    if missing:
        config = spec.config
        name = config.image_id if spec.lane is Lane.IMAGE and config.image_id else config.id
        raise Conflict(missing_message(name, missing), code="model_files_missing")


__all__ = ["LiveLedger", "named_by_policy", "refuse_missing", "shutting_down"]
