"""Lending at request time (docs/lending.md): the owner's side, played by the master for the
requests it holds.

A complete, non-streaming request for a model that owns links is held in the router while
its owner already has `cluster.scheduling_backend_depth` requests in flight or queued: the
master's own model (its runtime views) or a slave's (that node's runtime status, and what this
master relayed there). Held, it is lent only over a live lease with a free slot
(router/lending/planner.py plans them); without one it waits until the owner has room or
`runtime.queue_timeout`. A refusal (409 `offload_returned`), an unreachable helper or a helper
error puts the request back on its owner: the client never sees any of it.

The helper's side is router/lending/helper.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from router.appkeys import CLUSTER, SESSION, SETTINGS
from router.cluster import NodeEntry, Target, node_headers, node_path_qs
from router.config import ModelConfig
from router.domain import Lane
from router.forwarding import ModelRewriter, ProxyResult, Selection
from router.forwarding.selector import SELECTOR_HEADER
from router.lending import planner as plan
from router.lending.keys import BORROWED, LEND, LENDING, LINKS
from router.lending.leases import Lease, OwnerKey
from router.lending.links import Link
from router.lending.planning import context_fits, cut_after, hold_for_helper, needed_tokens
from router.lending.status import loopback_url
from router.lending.wire import OFFLOAD_RETURNED, lent_headers

LENDING_LANES = frozenset({Lane.TEXT, Lane.IMAGE})
# Paths whose follow-ups must find the node that made them (stored responses, sd-server jobs)
# are never lent: only the relay pins them.
_NOT_LENT = ("/v1/responses", "/sdcpp/")
WAIT_STEP_S = 0.05  # how often a held request looks again (cheap: local views, cached status)


def _gated(request: web.Request, selection: Selection, lane: Lane) -> bool:
    """Whether this request may be held and lent at all. The caller passes only requests
    forwarded as the client sent them (a rewritten one cannot be served as sent elsewhere)."""
    return (
        request.app[SETTINGS].cluster.role == "master"
        and lane in LENDING_LANES
        and selection.complete
        and request.get(BORROWED) is None
        and not request.path.startswith(_NOT_LENT)
        and not _streams(selection.prefix)
    )


def lendable(
    request: web.Request, selection: Selection, config: ModelConfig, lane: Lane
) -> tuple[Link, ...]:
    """The links this request for the master's own `config` may be lent over (empty: none)."""
    if not request.app[LINKS].links or not _gated(request, selection, lane):
        return ()
    node_id = request.app[SETTINGS].cluster.node_id
    return request.app[LINKS].owned(lane.value, node_id, config.id)


def lendable_remote(
    request: web.Request, selection: Selection, target: Target, lane: Lane
) -> tuple[Link, ...]:
    """The links of the slave model `target` names, when this request may be held for it."""
    if not request.app[LINKS].links or not _gated(request, selection, lane):
        return ()
    replica = target.replica
    return request.app[LINKS].owned(lane.value, replica.node_id, replica.local_id)


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


@contextlib.contextmanager
def finishing(request: web.Request, links: tuple[Link, ...]) -> Iterator[None]:
    """Around an owner's own request of a linked model: its end is a planning event."""
    try:
        yield
    finally:
        if links:
            plan.trigger(request.app, owner_of(links), "completed")


async def hold_then_relay(
    request: web.Request,
    selection: Selection,
    links: tuple[Link, ...],
    result: ProxyResult,
    relay: Callable[[], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """A request for a slave's linked model: held here, lent, or relayed to its owner node by
    `relay` (the forwarder's relay to that node: lending does not reach into the API)."""
    lent = await lend(request, selection, links, result)
    if lent is not None:
        return lent
    owner, holding = owner_of(links), request.app[LEND].holding
    holding.count(holding.relaying, owner, 1)
    try:
        return await relay()
    finally:
        holding.count(holding.relaying, owner, -1)
        plan.trigger(request.app, owner, "completed")


async def lend(
    request: web.Request, selection: Selection, links: tuple[Link, ...], result: ProxyResult
) -> web.StreamResponse | None:
    """Hold the request while its owner is busy; the helper's answer when a lease took it,
    None to run it on the owner (it has room, the helper returned it, or it was held long)."""
    app = request.app
    owner = owner_of(links)
    values = app[LENDING].values
    need = needed_tokens(selection.prefix, values.scheduling_context_reserve)
    holding = app[LEND].holding
    holding.hold(owner, need)
    held = True
    plan.trigger(app, owner, "enqueued")
    try:
        end = time.monotonic() + app[SETTINGS].runtime.queue_timeout
        waited_for_helper = False
        while True:
            seen = await plan.statuses(app, {owner[1]})
            load = plan.owner_load(app, owner, seen)
            if time.monotonic() > end:
                return None
            if load < app[LENDING].values.scheduling_backend_depth:
                lease = _held_for(request, owner, load)
                if lease is None:
                    return None  # no await between this check and the caller's lease or relay
                if not waited_for_helper:
                    waited_for_helper = True
                    plan.record(app, "dispatch", "held_for_helper", lease)
            lease = _take(request, owner, need)
            if lease is not None:
                holding.unhold(owner, need)
                held = False
                return await _lend_over(request, selection, lease, links, result)
            await asyncio.sleep(WAIT_STEP_S)
    finally:
        if held:
            holding.unhold(owner, need)


def _held_for(request: web.Request, owner: OwnerKey, load: int) -> Lease | None:
    """The faster helper's lease this request is held for although its owner has room (every
    slot of it busy); None to run it on the owner. Never while the owner is idle."""
    app = request.app
    if load == 0 or not app[LENDING].values.offload_hold_for_faster_helper:
        return None
    book, now = app[LEND], time.monotonic()
    for lease in book.table.live(owner, now):
        if book.table.in_use.get(lease.key, 0) < lease.helper_slots:
            continue
        owner_fit, helper_fit = plan.fits_of(app, lease)
        if hold_for_helper(
            owner_job=owner_fit.job_s if owner_fit is not None and owner_fit.fitted else None,
            helper_job=helper_fit.job_s if helper_fit is not None and helper_fit.fitted else None,
            started=book.holding.started.get(lease.key, ()),
            now=now,
        ):
            return lease
    return None


def _take(request: web.Request, owner: OwnerKey, need: int) -> Lease | None:
    """A free slot of a live lease whose helper's window holds this request."""
    now = time.monotonic()
    plan.expire(request.app, now)

    def fits(lease: Lease) -> bool:
        if lease.lane != Lane.TEXT.value:
            return True
        model = plan.node_models(request.app, lease.helper_node_id)[1].get(lease.helper_model_id)
        return model is not None and context_fits(need, model.context_length)

    book = request.app[LEND]
    lease = book.table.take(owner, now, fits)
    if lease is not None and lease.probe:
        book.probed[lease.key] = now
        # A probe's slots are used once: the next probe is planned anew when it comes due.
        if book.table.in_use.get(lease.key, 0) >= lease.helper_slots:
            book.table.clear(lease.key)
    return lease


async def _lend_over(
    request: web.Request,
    selection: Selection,
    lease: Lease,
    links: tuple[Link, ...],
    result: ProxyResult,
) -> web.StreamResponse | None:
    app = request.app
    holding = app[LEND].holding
    link = next((x for x in links if x.helper == (lease.helper_node_id, lease.helper_model_id)),
                None)  # fmt: skip
    holding.count(holding.lent, lease.owner, 1)
    started = time.monotonic()
    holding.started.setdefault(lease.key, []).append(started)
    plan.record(app, "dispatch", "lent", lease, detail={"path": request.path})
    try:
        answer, why = (None, "link_removed") if link is None else \
            await _lend_once(request, selection, link, lease, result)  # fmt: skip
    finally:
        app[LEND].table.release(lease.key)
        holding.count(holding.lent, lease.owner, -1)
        out = holding.started.get(lease.key, [])
        out.remove(started)
        if not out:
            holding.started.pop(lease.key, None)
    if answer is None:
        plan.record(app, "dispatch", "returned", lease, detail={"reason": why})
    plan.trigger(app, lease.owner, "borrowed_completed")
    return answer


async def _lend_once(
    request: web.Request, selection: Selection, link: Link, lease: Lease, result: ProxyResult
) -> tuple[web.StreamResponse | None, str]:
    """The helper's answer, or None and why the request goes back to its owner."""
    service = request.app[CLUSTER]
    itself = link.helper_node_id == request.app[SETTINGS].cluster.node_id
    entry = None if itself else service.registry.node(link.helper_node_id)
    if entry is None and not itself:
        return None, "helper_not_registered"
    rewriter = ModelRewriter(selection.model or link.owner_model_id, link.helper_model_id)
    body = rewriter.request_body(selection.prefix) if selection.prefix else b""
    url = _helper_url(request, entry, node_path_qs(request, selection, link.helper_model_id))
    headers = node_headers(request, request.app[SETTINGS].cluster.token or "", selection,
                           link.helper_model_id)  # fmt: skip
    headers.popall("Accept-Encoding", None)  # the answer's model IDs are rewritten here
    # Named outright: the request may have had no selector (the lane's model was used here).
    headers[SELECTOR_HEADER] = link.helper_model_id
    headers.update(lent_headers(link.owner, allow_load=link.load_if_unloaded,
                                restore=lease.restore_helper_model))  # fmt: skip
    owner_fit, helper_fit = plan.fits_of(request.app, lease)
    cut = cut_after(lease.load_helper_model, helper_fit, owner_fit)
    # The master's own node is no relay target: nothing to reserve there.
    with contextlib.nullcontext() if itself else service.reserved(link.helper_node_id):
        try:
            status, content_type, raw = await _exchange(request, url, body, headers, cut)
        except _NotStarted:
            return None, f"helper_not_started within {cut or 0:g}s"
        except aiohttp.ClientConnectionError as err:
            if entry is not None:
                service.node_failed(entry.node_url, f"a lent request failed: {err}")
            return None, "helper_unreachable"
        except (aiohttp.ClientError, TimeoutError):
            return None, "forward_failed"
    returned = _returned(raw) if status == 409 else None
    if returned is not None or status >= 500:
        return (
            None,
            f"{OFFLOAD_RETURNED}: {returned}" if returned is not None else f"status {status}",
        )
    result.relayed, result.upstream_status, result.status = True, status, status
    result.bytes_in, result.bytes_out = len(body), len(raw)
    out = web.Response(status=status, body=rewriter.response_body(raw))
    if content_type:
        out.headers["Content-Type"] = content_type
    return out, ""


def _helper_url(request: web.Request, entry: NodeEntry | None, path_qs: str) -> str:
    """The helper node's URL for `path_qs`; `entry` None: the master's own model is the
    helper, reached by one loopback hop to its own node inference route, so the lent request
    takes the helper's path (mark, gate, hand back, records) as on any slave."""
    if entry is None:
        return loopback_url(request.app) + path_qs
    return request.app[CLUSTER].client.url(entry.node_url, path_qs)


class _NotStarted(Exception):
    """The helper did not start answering in time: the owner takes the request back."""


async def _exchange(
    request: web.Request, url: str, body: bytes, headers: CIMultiDict[str], cut: float | None
) -> tuple[int, str | None, bytes]:
    """Send a lent request buffered; its status, content type and body. The answer's head must
    come within `cut` seconds (when priced); then the body streams under the idle timeout."""
    idle = request.app[SETTINGS].runtime.stream_idle_timeout
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=idle)
    deadline = asyncio.timeout(cut)
    try:
        async with deadline:
            upstream = await request.app[SESSION].request(
                request.method, url, data=body or None, headers=headers, timeout=timeout,
                allow_redirects=False,
            )  # fmt: skip
    except TimeoutError:
        if deadline.expired():
            raise _NotStarted from None
        raise  # the socket's own idle timeout: a failed forward
    async with upstream:
        raw = await upstream.read()
        return upstream.status, upstream.headers.get("Content-Type"), raw


def _returned(raw: bytes) -> str | None:
    """The helper's message when it handed the request back (409 `offload_returned`)."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict) and error.get("code") == OFFLOAD_RETURNED:
        return str(error.get("message", ""))[:512]
    return None
