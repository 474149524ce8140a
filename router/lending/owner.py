"""Lending at request time (docs/lending.md): the owner's side, played by the master for the
requests it holds.

A complete, non-streaming request for a model that owns links is held in the router while
its owner already has `cluster.scheduling_backend_depth` requests in flight or queued: the
master's own model (its runtime views) or a slave's (that node's runtime status, and what this
master relayed there). Held, it is lent only over a live lease with a free slot
(router/lending/planner.py plans them); without one it waits until the owner has room or
`runtime.queue_timeout`. It waits on its owner's wake-up future (leases.Wakeups), resolved by
a grant, a freed slot or a finished owner job: no timer of its own. A refusal (409 `offload_returned`), an unreachable helper or a helper
error puts the request back on its owner: the client never sees any of it.

The call that sends a lent request to its helper is router/lending/helper_call.py; the
helper's side is router/lending/helper.py.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

from router.cluster import Asked, Target
from router.config import ModelConfig
from router.domain import Lane
from router.forwarding import ProxyResult, Selection
from router.lending.helper_call import Answer, HelperCall
from router.lending.leases import Lease, OwnerKey
from router.lending.links import Link
from router.lending.planner import STATUS_TTL_S, Planner, record_to
from router.lending.planning import context_fits, helper_done, hold_for_helper, needed_tokens
from router.lending.state import LendingState

LENDING_LANES = frozenset({Lane.TEXT, Lane.IMAGE})
# Paths whose follow-ups must find the node that made them (stored responses, sd-server jobs)
# are never lent: only the relay pins them.
_NOT_LENT = ("/v1/responses", "/sdcpp/")
_AFTER_S = 0.001  # a hold's own end: looked at just after it, when it has surely passed


class Owner:
    """The owner's side of one `Lending` service: the requests a master holds and lends."""

    def __init__(self, lending: LendingState, planner: Planner) -> None:
        self.lending = lending
        self.planner = planner
        self.book = lending.book
        self.helper_call = HelperCall(lending, planner)

    def _gated(self, asked: Asked, selection: Selection, lane: Lane) -> bool:
        """Whether this request may be held and lent at all. The caller passes only requests
        forwarded as the client sent them (a rewritten one cannot be served as sent elsewhere)
        and never a borrowed one."""
        return (
            self.lending.master
            and lane in LENDING_LANES
            and selection.complete
            and not asked.path.startswith(_NOT_LENT)
            and not _streams(selection.prefix)
        )

    def lendable(
        self, asked: Asked, selection: Selection, config: ModelConfig, lane: Lane
    ) -> tuple[Link, ...]:
        """The links this request for the master's own `config` may be lent over (empty: none).
        The caller asks only for a client's request: a borrowed one is served where it was
        lent, never lent on."""
        return self._owned(asked, selection, lane, (self.lending.node_id, config.id))

    def lendable_remote(
        self, asked: Asked, selection: Selection, target: Target, lane: Lane
    ) -> tuple[Link, ...]:
        """The links of the slave model `target` names, when this request may be held for it."""
        replica = target.replica
        return self._owned(asked, selection, lane, (replica.node_id, replica.local_id))

    def _owned(
        self, asked: Asked, selection: Selection, lane: Lane, owner: tuple[str, str]
    ) -> tuple[Link, ...]:
        table = self.lending.links
        if not table.links or not self._gated(asked, selection, lane):
            return ()
        return table.owned(lane.value, *owner)

    def job_ended(self, config: ModelConfig) -> None:
        """A lease of this node's `config` ended (the runtime manager tells every one, however
        it was taken): a request held for it as an owner looks again."""
        for lane in LENDING_LANES:
            self.book.wakeups.notify((lane.value, self.lending.node_id, config.id))

    @contextlib.contextmanager
    def finishing(self, links: tuple[Link, ...]) -> Iterator[None]:
        """Around an owner's own request of a linked model: its end is a planning event."""
        try:
            yield
        finally:
            if links:
                self.book.wakeups.notify(owner_of(links))
                self.planner.trigger(owner_of(links), "completed")

    @contextlib.contextmanager
    def relaying(self, links: tuple[Link, ...]) -> Iterator[None]:
        """Around the relay of a request for a slave's linked model to its owner node, once
        `lend` gave it back (the caller relays: lending does not reach into the forwarder)."""
        owner, holding = owner_of(links), self.book.holding
        holding.count(holding.relaying, owner, 1)
        try:
            yield
        finally:
            holding.count(holding.relaying, owner, -1)
            self.book.wakeups.notify(owner)
            self.planner.trigger(owner, "completed")

    async def lend(
        self, asked: Asked, selection: Selection, links: tuple[Link, ...], result: ProxyResult
    ) -> Answer | None:
        """Hold the request while its owner is busy; the helper's answer when a lease took it,
        None to run it on the owner (it has room, the helper returned it, or it was held long)."""
        owner = owner_of(links)
        need = needed_tokens(selection.prefix, self.lending.values.scheduling_context_reserve)
        holding = self.book.holding
        holding.hold(owner, need)
        held = True
        self.planner.trigger(owner, "enqueued")
        try:
            end = time.monotonic() + self.lending.settings.runtime.queue_timeout
            waited_for_helper = False
            while True:
                holding.looks += 1
                seen = await self.planner.statuses({owner[1]})
                load = self.planner.owner_load(owner, seen)
                if time.monotonic() > end:
                    return None
                wake_by = end
                if load < self.lending.values.scheduling_backend_depth:
                    lease = self._held_for(owner, load)
                    if lease is None:
                        return None  # no await between this check and the caller's lease or relay
                    if not waited_for_helper:
                        waited_for_helper = True
                        record_to(self.lending.decisions, "dispatch", "held_for_helper", lease)
                    wake_by = min(end, self._hold_ends(lease))
                lease = self._take(owner, need)
                if lease is not None:
                    holding.unhold(owner, need)
                    held = False
                    return await self._lend_over(asked, selection, lease, links, result)
                await self.book.wakeups.wait(owner, self._bound(owner, wake_by))
        finally:
            if held:
                holding.unhold(owner, need)

    def _held_for(self, owner: OwnerKey, load: int) -> Lease | None:
        """The faster helper's lease this request is held for although its owner has room
        (every slot of it busy); None to run it on the owner. Never while the owner is idle."""
        if load == 0 or not self.lending.values.offload_hold_for_faster_helper:
            return None
        book, now = self.book, time.monotonic()
        for lease in book.table.live(owner, now):
            if book.table.in_use.get(lease.key, 0) < lease.helper_slots:
                continue
            owner_fit, helper_fit = self.planner.fits_of(lease)
            if hold_for_helper(
                owner_job=owner_fit.job_s if owner_fit is not None and owner_fit.fitted else None,
                helper_job=helper_fit.job_s
                if helper_fit is not None and helper_fit.fitted
                else None,
                started=book.holding.started.get(lease.key, ()),
                now=now,
            ):
                return lease
        return None

    def _hold_ends(self, lease: Lease) -> float:
        """When a hold for the busy `lease` ends by itself: the helper overran its prediction
        (planning.hold_for_helper) or the lease ran out. Just after, so the look finds it."""
        helper_fit = self.planner.fits_of(lease)[1]
        started = self.book.holding.started.get(lease.key, ())
        if helper_fit is None or helper_fit.job_s is None or not started:
            return lease.expires
        return min(lease.expires, helper_done(helper_fit.job_s, started)) + _AFTER_S

    def _bound(self, owner: OwnerKey, wake_by: float) -> float:
        """How long a held request waits for an event before it looks again anyway: until
        `wake_by`. A slave owner's own clients' jobs end unseen here (only its runtime status
        tells), so for one the wait also ends when that status is due again."""
        left = wake_by - time.monotonic()
        return left if owner[1] == self.lending.node_id else min(left, STATUS_TTL_S)

    def _take(self, owner: OwnerKey, need: int) -> Lease | None:
        """A free slot of a live lease whose helper's window holds this request."""
        now = time.monotonic()
        self.planner.expire(now)

        def fits(lease: Lease) -> bool:
            if lease.lane != Lane.TEXT.value:
                return True
            models = self.planner.node_models(lease.helper_node_id)[1]
            model = models.get(lease.helper_model_id)
            return model is not None and context_fits(need, model.context_length)

        book = self.book
        lease = book.table.take(owner, now, fits)
        if lease is not None and lease.probe:
            book.probed[lease.key] = now
            # A probe's slots are used once: the next probe is planned anew when it comes due.
            if book.table.in_use.get(lease.key, 0) >= lease.helper_slots:
                book.table.clear(lease.key)
        return lease

    async def _lend_over(
        self,
        asked: Asked,
        selection: Selection,
        lease: Lease,
        links: tuple[Link, ...],
        result: ProxyResult,
    ) -> Answer | None:
        holding = self.book.holding
        link = next(
            (x for x in links if x.helper == (lease.helper_node_id, lease.helper_model_id)), None
        )
        holding.count(holding.lent, lease.owner, 1)
        started = time.monotonic()
        holding.started.setdefault(lease.key, []).append(started)
        record_to(self.lending.decisions, "dispatch", "lent", lease, detail={"path": asked.path})
        try:
            answer, why = (
                (None, "link_removed")
                if link is None
                else await self.helper_call.send(asked, selection, link, lease, result)
            )
        finally:
            self.book.table.release(lease.key)
            holding.count(holding.lent, lease.owner, -1)
            self.book.wakeups.notify(lease.owner)  # a slot is free (and `started` changed)
            out = holding.started.get(lease.key, [])
            out.remove(started)
            if not out:
                holding.started.pop(lease.key, None)
        if answer is None:
            record_to(self.lending.decisions, "dispatch", "returned", lease, detail={"reason": why})
        self.planner.trigger(lease.owner, "borrowed_completed")
        return answer


def _streams(body: bytes) -> bool:
    if b'"stream"' not in body:
        return False
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


def owner_of(links: tuple[Link, ...]) -> OwnerKey:
    first = links[0]
    return (first.lane, first.owner_node_id, first.owner_model_id)
