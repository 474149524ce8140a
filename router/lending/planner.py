"""Lending's planner on the master (docs/lending.md, "Leases") and every node's cost refit
(`GET /router/v1/site/offload/summary` reads them: router/api/site/lending_summary.py).

Every node refits its own costs from its own store every `scheduling_refresh_interval` and
reports them in `runtime-status`. The master plans per owner model on events (a request held,
a held, lent or own request finished) and on that tick: at most one planning run per owner at
a time plus one pending. A run polls the nodes involved, prices each link
(router/lending/pricing.py, planning.py) and grants, renews or clears leases; decision rows
are recorded on changes only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping

from router.cluster import NodeModel, RuntimeStatus
from router.lending.costs import CostFit, fit_costs, fit_of, job_seconds
from router.lending.decisions import Decision, DecisionLog, Kind
from router.lending.leases import Lease, LeaseKey, LendBook, OwnerKey
from router.lending.links import Link
from router.lending.planning import HelperView, PlanRow, plan_owner
from router.lending.state import LendingState

log = logging.getLogger(__name__)

STATUS_TTL_S = 0.25  # a node's status is reused this long by every held request and plan
# A helper whose own work was seen this recently is left alone: its clients tend to come in
# runs, and a lent request would make the next of them wait behind borrowed work.
HELPER_BUSY_RECENT_S = 2.0


class Planner:
    """The master's planning runs and every node's cost refit, for one `Lending` service."""

    def __init__(self, lending: LendingState) -> None:
        self.lending = lending
        self.book: LendBook = lending.book
        self._ticker: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick())

    async def close(self) -> None:
        tasks = [*([self._ticker] if self._ticker else []), *self.book.running.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def refit(self) -> None:
        """This node's own fits from its own store (the reads run on the store's reader thread)."""
        values = self.lending.values
        store = self.lending.store
        samples = await store.costs.samples(time.time() - values.scheduling_sample_window)
        loads = await store.load_attempts.durations()
        jobs = [(model, lane, job_seconds(ms, wait)) for model, lane, ms, wait in samples]
        self.book.costs = fit_costs(jobs, loads, values.scheduling_min_samples)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.lending.values.scheduling_refresh_interval)
            try:
                await self.refit()
            except Exception:
                log.exception("refitting lending costs failed")
            if self.lending.master:
                book = self.book
                self.expire(time.monotonic())
                for owner in set(book.holding.held) | book.table.owners():
                    self.trigger(owner, "tick")

    def expire(self, now: float) -> None:
        for lease in self.book.table.expire(now):
            self._cleared(lease, "", "expired")

    def _cleared(self, lease: Lease, why: str, reason: str) -> None:
        """`lease` left the table: recorded, and a request held for it looks again."""
        record_to(self.lending.decisions, "dispatch", "lease_cleared", lease, why, (reason,))
        self.book.wakeups.notify(lease.owner)

    def trigger(self, owner: OwnerKey, why: str) -> None:
        """Plan `owner` soon: one run at a time, and at most one more queued behind it."""
        book = self.book
        if owner in book.running:
            book.pending[owner] = why
            return
        book.running[owner] = asyncio.create_task(self._runs(owner, why))

    async def _runs(self, owner: OwnerKey, why: str | None) -> None:
        book = self.book
        try:
            while why is not None:
                try:
                    await self._plan(owner, why)
                except Exception:
                    log.exception("planning %s failed", owner)
                why = book.pending.pop(owner, None)
        finally:
            book.running.pop(owner, None)

    async def statuses(self, node_ids: Iterable[str]) -> dict[str, RuntimeStatus]:
        """Each named node's status, reused for STATUS_TTL_S (None-free: a silent node is left
        out)."""
        table = self.lending.links
        wanted = {n for n in node_ids if n != self.lending.node_id}
        now = time.monotonic()
        stale = sorted(
            n for n in wanted if n not in table.seen or now - table.seen[n][0] >= STATUS_TTL_S
        )
        if stale:
            # One poll per node at a time: every held request that finds it stale shares it.
            fetching = self.book.fetching
            if not all(n in fetching for n in stale):
                asked = [n for n in stale if n not in fetching]
                poll = asyncio.ensure_future(self._poll(asked))
                for node_id in asked:
                    fetching[node_id] = poll
            polls = {id(f): f for n in stale if (f := fetching.get(n)) is not None}
            # Shielded: one waiter that goes away (its client did) does not cancel the others'.
            await asyncio.gather(*map(asyncio.shield, polls.values()), return_exceptions=True)
        out = {}
        for node_id in wanted:
            status = table.seen.get(node_id, (0.0, None))[1]
            if status is not None:
                out[node_id] = status
        return out

    async def _poll(self, node_ids: list[str]) -> None:
        try:
            for node_id, status in (await self.lending.cluster.runtime_statuses(node_ids)).items():
                self.lending.links.seen[node_id] = (time.monotonic(), status)
                for lane in _lanes_with_own_work(status):
                    self.book.busy_seen[(node_id, lane)] = time.monotonic()
        finally:
            for node_id in node_ids:
                self.book.fetching.pop(node_id, None)

    def owner_load(self, owner: OwnerKey, seen: dict[str, RuntimeStatus]) -> int:
        """The owner's requests in its backend or queued for it. A slave's: the larger of what
        its status says and what this master relayed there and has not seen end (the status
        lags)."""
        lane, node_id, model_id = owner
        if node_id == self.lending.node_id:
            views = self.lending.runtimes.views()
            # Released here, not yet admitted:
            waiting = self.lending.gates.waiting_own(lane, model_id)
            return waiting + sum(v.leases + v.queued for v in views if v.config.id == model_id)
        status = seen.get(node_id)
        load = status.models.get(model_id) if status is not None else None
        reported = load.active + load.queued if load is not None else 0
        return max(reported, self.book.holding.relaying.get(owner, 0))

    def fits_of(self, lease: Lease) -> tuple[CostFit | None, CostFit | None]:
        """The owner's and the helper's fits for `lease`, as last seen (no poll)."""
        seen = self.lending.links.seen

        def of(node_id: str, model_id: str) -> CostFit | None:
            if node_id == self.lending.node_id:
                return fit_of(self.book.costs, model_id, lease.lane)
            status = seen.get(node_id, (0.0, None))[1]
            return fit_of(costs_of(status), model_id, lease.lane) if status is not None else None

        return of(lease.owner_node_id, lease.owner_model_id), of(
            lease.helper_node_id, lease.helper_model_id
        )

    async def _plan(self, owner: OwnerKey, why: str) -> None:
        lane, node_id, model_id = owner
        book = self.book
        links = self.lending.links.owned(lane, node_id, model_id)
        self.expire(time.monotonic())
        helpers_now = {link.helper for link in links}
        for lease in book.table.live(owner, time.monotonic()):
            if (lease.helper_node_id, lease.helper_model_id) not in helpers_now:
                book.table.clear(lease.key)
                self._cleared(lease, why, "link_removed")
        if not links:
            return
        needs = list(book.holding.held.get(owner, ()))
        if not needs:
            return  # nothing held: its leases run out by their TTL
        seen = await self.statuses({link.helper_node_id for link in links} | {node_id})
        own = self.lending.node_id
        if any(link.helper_node_id == own for link in links):
            seen[own] = self.own_seen()  # the master as a helper: its own numbers, no poll
        owner_costs = (
            book.costs if node_id == own else costs_of(seen[node_id]) if node_id in seen else ()
        )
        helpers = {link.helper: self.helper_view(link, seen, owner) for link in links}
        rows = plan_owner(
            links,
            needs=list(book.holding.held.get(owner, ())),
            owner_busy=self.owner_load(owner, seen),
            owner_cost=fit_of(owner_costs, model_id, lane),
            helpers=helpers,
            values=self.lending.values,
            now=time.monotonic(),
        )
        for row in rows:
            apply_row(book, self.lending.decisions, row, why)

    def own_seen(self) -> RuntimeStatus:
        """This node's status as a helper sees itself; its own work marks the lane busy, as a
        polled helper's does."""
        status = self.lending.own_status()
        now = time.monotonic()
        for lane in _lanes_with_own_work(status):
            self.book.busy_seen[(status.node_id, lane)] = now
        return status

    def node_models(self, node_id: str) -> tuple[bool, dict[str, NodeModel]]:
        """Whether a helper node is up, and its models by local ID: this node's own catalog, or
        a registered node's last snapshot."""
        if node_id == self.lending.node_id:
            return True, self.lending.own_models()
        entry = self.lending.cluster.registry.node(node_id)
        if entry is None:
            return False, {}
        return entry.healthy, {m.local_id: m for m in entry.models}

    def helper_view(
        self, link: Link, seen: dict[str, RuntimeStatus], owner: OwnerKey
    ) -> HelperView:
        book = self.book
        status = seen.get(link.helper_node_id)
        healthy, models = self.node_models(link.helper_node_id)
        model = models.get(link.helper_model_id)
        available = healthy and model is not None and model.available
        load = status.lanes.get(link.lane) if status else None
        own_work = max(0, load.active + load.queued - load.borrowed) if load else 0
        now = time.monotonic()
        busy_at = book.busy_seen.get((link.helper_node_id, link.lane))
        recently = busy_at is not None and now - busy_at < HELPER_BUSY_RECENT_S
        probed = book.probed.get(LeaseKey(link.lane, *owner[1:], *link.helper))
        loaded = status is not None and link.helper_model_id in status.loaded_models
        others = [
            m
            for m in (status.loaded_models if status else ())
            if m != link.helper_model_id and m in models and link.lane in models[m].lanes
        ]
        fits = costs_of(status) if status is not None else ()
        claimed = any(
            lease.helper_node_id == link.helper_node_id
            and lease.lane == link.lane
            and lease.owner != owner
            and lease.expires > now
            for lease in book.table.leases.values()
        )
        return HelperView(
            answered=status is not None,
            available=available,
            own_work=own_work,
            recently_busy=recently and own_work == 0,
            loaded=loaded,
            displaces=bool(others),
            context_length=model.context_length if model is not None else None,
            cost=fit_of(fits, link.helper_model_id, link.lane),
            displaced=fit_of(fits, others[0], link.lane) if others else None,
            claimed=claimed,
            idle_s=now - (book.started if busy_at is None else busy_at),
            since_probe_s=float("inf") if probed is None else now - probed,
        )


def record_to(
    decisions: DecisionLog,
    kind: Kind,
    outcome: str,
    item: Lease | Link,
    trigger_: str = "",
    reasons: Iterable[str] = (),
    detail: Mapping[str, object] | None = None,
) -> None:
    decisions.record(
        Decision(
            kind,
            outcome,
            item.lane,
            item.owner_node_id,
            item.owner_model_id,
            item.helper_node_id,
            item.helper_model_id,
            trigger_,
            tuple(reasons),
            dict(detail or {}),
        )
    )


def apply_row(book: LendBook, decisions: DecisionLog, row: PlanRow, why: str) -> None:
    """Grant, renew or clear the lease of one plan row; rows are recorded on changes only."""
    link = row.link
    key = LeaseKey(link.lane, *link.owner, *link.helper)
    if book.last_rows.get(key) != (row.outcome, row.reasons):
        book.last_rows[key] = (row.outcome, row.reasons)
        record_to(decisions, "plan", row.outcome, link, why, row.reasons, row.detail)
    if row.lease is not None:
        if book.table.put(row.lease):
            detail = {"helper_slots": row.lease.helper_slots, "ttl_ms": row.lease.ttl_ms}
            record_to(decisions, "dispatch", "lease_updated", row.lease, why, row.reasons, detail)
        book.wakeups.notify(row.lease.owner)  # granted or renewed: a held request may take it
        return
    old = book.table.clear(key)
    if old is not None:
        record_to(decisions, "dispatch", "lease_cleared", old, why, row.reasons)
        book.wakeups.notify(old.owner)


def _lanes_with_own_work(status: RuntimeStatus | None) -> list[str]:
    if status is None:
        return []
    return [lane for lane, x in status.lanes.items() if x.active + x.queued > x.borrowed]


def costs_of(status: RuntimeStatus) -> tuple[CostFit, ...]:
    return tuple(CostFit(**c.model_dump()) for c in status.costs)
