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

The helper's side is router/lending/helper.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass

from multidict import CIMultiDict

from router.cluster import (
    Asked,
    NodeEntry,
    PeerUnreachable,
    Target,
    node_headers,
    node_path_qs,
)
from router.config import ModelConfig
from router.domain import Lane
from router.errors import BadGateway, GatewayTimeout
from router.forwarding import ModelRewriter, ProxyResult, Selection
from router.forwarding.selector import SELECTOR_HEADER
from router.lending.leases import Lease, OwnerKey
from router.lending.links import Link
from router.lending.planner import STATUS_TTL_S, Planner, record_to
from router.lending.planning import (
    context_fits,
    cut_after,
    helper_done,
    hold_for_helper,
    needed_tokens,
)
from router.lending.state import LendingState
from router.lending.wire import OFFLOAD_RETURNED, lent_headers, returned_message

LENDING_LANES = frozenset({Lane.TEXT, Lane.IMAGE})
# Paths whose follow-ups must find the node that made them (stored responses, sd-server jobs)
# are never lent: only the relay pins them.
_NOT_LENT = ("/v1/responses", "/sdcpp/")
_AFTER_S = 0.001  # a hold's own end: looked at just after it, when it has surely passed


@dataclass(frozen=True)
class Answer:
    """A helper's whole answer to a lent request: the caller renders it to its client."""

    status: int
    content_type: str | None
    body: bytes


class Owner:
    """The owner's side of one `Lending` service: the requests a master holds and lends."""

    def __init__(self, lending: LendingState, planner: Planner) -> None:
        self.lending = lending
        self.planner = planner
        self.book = lending.book

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
                else await self._lend_once(asked, selection, link, lease, result)
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

    async def _lend_once(
        self,
        asked: Asked,
        selection: Selection,
        link: Link,
        lease: Lease,
        result: ProxyResult,
    ) -> tuple[Answer | None, str]:
        """The helper's answer, or None and why the request goes back to its owner."""
        service = self.lending.cluster
        itself = link.helper_node_id == self.lending.node_id
        entry = None if itself else service.registry.node(link.helper_node_id)
        if entry is None and not itself:
            return None, "helper_not_registered"
        rewriter = ModelRewriter(selection.model or link.owner_model_id, link.helper_model_id)
        body = rewriter.request_body(selection.prefix) if selection.prefix else b""
        target = (self._helper_base(entry), node_path_qs(asked, selection, link.helper_model_id))
        headers = self._lent_headers(asked, selection, link, lease)
        owner_fit, helper_fit = self.planner.fits_of(lease)
        cut = cut_after(lease.load_helper_model, helper_fit, owner_fit)
        # The master's own node is no relay target: nothing to reserve there.
        with contextlib.nullcontext() if itself else service.reserved(link.helper_node_id):
            exchange = self._exchange(asked.method, target, body, headers, cut)
            answer, why = await self._sent(exchange, cut, entry)
        if answer is None:
            return None, why
        status, raw = answer.status, answer.body
        returned = returned_message(raw) if status == 409 else None
        if returned is not None or status >= 500:
            return (
                None,
                f"{OFFLOAD_RETURNED}: {returned}" if returned is not None else f"status {status}",
            )
        result.relayed, result.upstream_status, result.status = True, status, status
        result.bytes_in, result.bytes_out = len(body), len(raw)
        return Answer(status, answer.content_type, rewriter.response_body(raw)), ""

    def _lent_headers(
        self, asked: Asked, selection: Selection, link: Link, lease: Lease
    ) -> CIMultiDict[str]:
        """The node headers of a lent request: the helper's model named, the lending marks."""
        token = self.lending.settings.cluster.token or ""
        headers = node_headers(asked, token, selection, link.helper_model_id)
        headers.popall("Accept-Encoding", None)  # the answer's model IDs are rewritten here
        # Named outright: the request may have had no selector (the lane's model was used here).
        headers[SELECTOR_HEADER] = link.helper_model_id
        headers.update(
            lent_headers(
                link.owner, allow_load=link.load_if_unloaded, restore=lease.restore_helper_model
            )
        )
        return headers

    async def _sent(
        self, exchange: Awaitable[Answer], cut: float | None, entry: NodeEntry | None
    ) -> tuple[Answer | None, str]:
        """The `exchange`'s answer, or None and why the helper gave none (a helper found down
        is marked failed: `entry` None is the master's own node)."""
        try:
            return await exchange, ""
        except _NotStarted:
            return None, f"helper_not_started within {cut or 0:g}s"
        except (PeerUnreachable, GatewayTimeout) as err:
            # A connection refused or lost, or silent past the connect or idle deadline
            # (aiohttp's socket timeouts are connection errors): the helper is down.
            if entry is not None:
                self.lending.cluster.node_failed(entry.node_url, f"a lent request failed: {err}")
            return None, "helper_unreachable"
        except (BadGateway, TimeoutError):
            return None, "forward_failed"  # a malformed or cut-short answer

    def _helper_base(self, entry: NodeEntry | None) -> str:
        """The helper node's base URL; `entry` None: the master's own model is the helper,
        reached by one loopback hop to its own node inference route (the node client allows
        its own listener), so the lent request takes the helper's path (mark, gate, hand
        back, records) as on any slave."""
        return self.lending.loopback_url() if entry is None else entry.node_url

    async def _exchange(
        self,
        method: str,
        target: tuple[str, str],
        body: bytes,
        headers: CIMultiDict[str],
        cut: float | None,
    ) -> Answer:
        """Send a lent request through the node client's streamed mode and read the answer
        whole; its status, content type and body. The answer's head must come within `cut`
        seconds (when priced); the connection within 5 s; then the body under the idle
        timeout."""
        client, (base, path_qs) = self.lending.cluster.client, target
        idle = self.lending.settings.runtime.stream_idle_timeout
        deadline = asyncio.timeout(cut)
        try:
            async with deadline:
                upstream = await client.stream(
                    method, base, path_qs, data=body or None, headers=headers, connect=5, idle=idle
                )
        except TimeoutError:
            # Only `cut` ends here: the client's own deadlines (connect, idle) are GatewayTimeout.
            if deadline.expired():
                raise _NotStarted from None
            raise
        async with upstream:
            raw = b"".join([chunk async for chunk in upstream.chunks()])
            return Answer(upstream.status, upstream.headers.get("Content-Type"), raw)


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


class _NotStarted(Exception):
    """The helper did not start answering in time: the owner takes the request back."""
