"""Lending, the helper's side (docs/lending.md), and the admission gate of enrolled models.

The node inference route sets the borrowed mark (only it can: it takes the cluster token and
nothing else). Every request served on this node passes `serving`:

- A model that is the owner or helper of a link here (or that has been lent work here) is
  *enrolled*: its requests pass its gate (router/lending/gate.py), which lets
  `scheduling_backend_depth` of them into the backend and holds the rest, own before
  borrowed. Any other model passes with one dict lookup.
- An own request on a lane hands back every borrowed request waiting in that lane's gates
  (409 `offload_returned`: the owner runs it; its client never sees it), and cancels a
  pending restore.
- A borrowed request is refused with 409 `offload_returned` while this node has its own work
  on the lane, when the model is not loaded and the link forbids a load, or when it waited
  its whole bound in the gate; otherwise it is served as this node's own and recorded here.
- Restore after borrow (router/lending/restore.py): when the owner asked for it, the lane
  goes back to the model it had before borrowed work once it has been quiet.

The owner's side is router/lending/owner.py.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator

from aiohttp import web

from router.appkeys import RUNTIMES, SETTINGS
from router.config import ModelConfig
from router.domain import Lane
from router.errors import Conflict, ServiceUnavailable
from router.lending.decisions import Decision
from router.lending.gate import Gate, Gates, GateTimeout, LaneGates, Outcome
from router.lending.keys import (
    BORROWED,
    BORROWED_OWNER,
    BORROWED_RESTORE,
    DECISIONS,
    GATES,
    LENDING,
    LINKS,
    RESTORE,
)
from router.lending.restore import Restorer
from router.lending.wire import OFFLOAD_RETURNED
from router.runtime import RuntimeView

log = logging.getLogger(__name__)


def ungated(request: web.Request, config: ModelConfig, lane: Lane) -> bool:
    """True when lending has nothing to do for this request here (most requests): an own
    request with no enrolled model on its lane, or with nothing of lending's on the lane that
    concerns it (no gate of its model, no borrowed work to hand back, no restore to cancel).
    Then the caller skips `serving`: an identity check and a dict lookup or two."""
    if request.get(BORROWED) is not None:
        return False
    app = request.app
    gates = app[GATES]
    links = app[LINKS].links
    if links is not gates.links_seen:
        gates.refresh(links)
    lane_gates = gates.lanes.get(lane.value)
    return lane_gates is None or (
        config.id not in lane_gates.gates
        and not lane_gates.borrowed_work
        and lane.value not in app[RESTORE].before
    )


@contextlib.asynccontextmanager
async def serving(request: web.Request, config: ModelConfig, lane: Lane) -> AsyncIterator[None]:
    """Around a request served here that `ungated` did not wave through: gated when its model
    is enrolled; a borrowed one is refused, handed back or counted as borrowed."""
    allow_load = request.get(BORROWED)
    if allow_load is not None:
        async with _borrowed(request, config, lane, allow_load=allow_load):
            yield
        return
    gates = request.app[GATES]
    links = request.app[LINKS].links
    if links is not gates.links_seen:
        gates.refresh(links)
    lane_gates = gates.lanes.get(lane.value)
    if lane_gates is None:
        yield
        return
    async with _own(request, lane_gates, config, lane):
        yield


@contextlib.asynccontextmanager
async def _own(
    request: web.Request, lane_gates: LaneGates, config: ModelConfig, lane: Lane
) -> AsyncIterator[None]:
    request.app[RESTORE].own_arrived(lane.value)
    in_backend = lane_gates.admitted_borrowed
    owners = lane_gates.hand_back()
    # One row per owner whose work went back: the owner fields say whose, `returned` how many
    # of that owner's (an unnamed owner, from an older master, is the empty pair).
    for owner, count in Counter(owners).items():
        detail = {"returned": count, "borrowed_in_backend": in_backend}
        _record(request, "borrowed_returned", lane, config.id, detail, owner)
    if in_backend:  # admitted borrowed work finishes first
        detail = {"returned": len(owners), "borrowed_in_backend": in_backend}
        _record(request, "native_waited_behind_borrowed", lane, config.id, detail)
    gate = lane_gates.gates.get(config.id)
    if gate is None:
        yield
        return
    await _enter(request, gate, config, borrowed=False)
    try:
        yield
    finally:
        gate.leave(borrowed=False)


@contextlib.asynccontextmanager
async def _borrowed(
    request: web.Request, config: ModelConfig, lane: Lane, *, allow_load: bool
) -> AsyncIterator[None]:
    app = request.app
    runtimes = app[RUNTIMES]
    table = app[LINKS]
    views = runtimes.views()
    gates = app[GATES]
    held = gates.lanes.get(lane.value)
    active = sum(v.leases for v in views if v.lane is lane)
    own = active + runtimes.queue_length(lane) - table.borrowed.get(lane.value, 0)
    if own > 0 or (held is not None and held.waiting_own > 0):
        raise Conflict(f"this node has its own {lane} work; the request goes back to its owner",
                       code=OFFLOAD_RETURNED)  # fmt: skip
    if not allow_load and not any(v.config.id == config.id and v.ready for v in views):
        raise Conflict(f"{config.id!r} is not loaded and the link forbids a load",
                       code=OFFLOAD_RETURNED)  # fmt: skip
    gate = gates.mark(lane.value, config.id)
    restore = app[RESTORE]
    restore.borrowed_arrived(lane.value)
    try:
        await _enter(request, gate, config, borrowed=True, owner=request.get(BORROWED_OWNER))
    except BaseException:
        restore.borrowed_done(lane.value)
        raise
    before = lane_model(runtimes.views(), lane)
    restore.borrowed_admitted(
        lane.value, before, before.id if before else None, config.id,
        wanted=request.get(BORROWED_RESTORE, False),
    )  # fmt: skip
    table.borrowed[lane.value] = table.borrowed.get(lane.value, 0) + 1
    try:
        yield
    finally:
        table.borrowed[lane.value] -= 1
        gate.leave(borrowed=True)
        restore.borrowed_done(lane.value)


async def _enter(
    request: web.Request,
    gate: Gate,
    config: ModelConfig,
    *,
    borrowed: bool,
    owner: tuple[str, str] | None = None,
) -> None:
    bound = request.app[SETTINGS].runtime.queue_timeout
    try:
        outcome = await gate.enter(borrowed=borrowed, bound=bound, owner=owner or ("", ""))
    except GateTimeout:
        if borrowed:
            raise Conflict(f"waited {bound:g}s for {config.id}; the request goes back to its owner",
                           code=OFFLOAD_RETURNED) from None  # fmt: skip
        raise ServiceUnavailable(
            f"timed out after {bound:g}s waiting for {config.id} (runtime.queue_timeout)",
            retry_after=5.0,
        ) from None
    if outcome is Outcome.RETURNED:
        raise Conflict("this node's own request came first; the request goes back to its owner",
                       code=OFFLOAD_RETURNED)  # fmt: skip


def _record(request: web.Request, outcome: str, lane: Lane, model_id: str,
            detail: dict[str, int], owner: tuple[str, str] = ("", "")) -> None:  # fmt: skip
    settings = request.app[SETTINGS]
    request.app[DECISIONS].record(
        Decision(
            # The owner is what the lending master named (X-Tensors-Offload-Owner); a
            # `native_waited_behind_borrowed` row names none: admitted work may be several's.
            kind="helper", outcome=outcome, lane=lane.value,
            owner_node_id=owner[0], owner_model_id=owner[1],
            helper_node_id=settings.cluster.node_id, helper_model_id=model_id,
            trigger="native_request", detail=dict(detail),
        )
    )  # fmt: skip


def lane_model(views: tuple[RuntimeView, ...], lane: Lane) -> ModelConfig | None:
    """The model the lane serves now (loading or ready, not on its way out)."""
    return next((v.config for v in views if lane in v.occupies and v.active), None)


def held(app: web.Application, lane: Lane) -> tuple[int, int]:
    """(own, borrowed) requests waiting in this node's gates on `lane`."""
    lane_gates = app[GATES].lanes.get(lane.value)
    return (lane_gates.waiting_own, lane_gates.waiting_borrowed) if lane_gates else (0, 0)


def restore_pending(app: web.Application, lane: Lane) -> str | None:
    config = app[RESTORE].pending(lane.value)
    return config.id if config else None


async def helper_context(app: web.Application) -> AsyncIterator[None]:
    """The gates and the restorer (after links_context: they read the lending values)."""
    settings = app[SETTINGS]
    app[GATES] = Gates(settings.cluster.node_id,
                       lambda: app[LENDING].values.scheduling_backend_depth)  # fmt: skip

    def quiet(lane_name: str) -> bool:
        lane = Lane(lane_name)
        lane_gates = app[GATES].lanes.get(lane_name)
        runtimes = app[RUNTIMES]
        busy = any(v.leases for v in runtimes.views() if lane in v.occupies)
        idle_gates = lane_gates is None or lane_gates.idle
        return idle_gates and not busy and runtimes.queue_length(lane) == 0

    async def load(config: ModelConfig, lane_name: str) -> None:
        lane = Lane(lane_name)
        now = lane_model(app[RUNTIMES].views(), lane)
        if now is not None and now.id == config.id:
            return
        log.info("restore after borrow: loading %s on the %s lane", config.id, lane_name)
        await app[RUNTIMES].load(config, lane)

    app[RESTORE] = Restorer(lambda: app[LENDING].values.offload_restore_delay, quiet, load)
    yield
    await app[RESTORE].close()
