"""Lending, the helper's side (docs/lending.md), and the admission gate of enrolled models.

The node inference route reads the borrowed marks (only it can: it takes the cluster token and
nothing else) and the pipeline hands them in as a `Lent`. Every request served on this node passes `serving`:

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
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from router.config import ModelConfig
from router.domain import Lane
from router.errors import Conflict, ServiceUnavailable
from router.lending.decisions import Decision
from router.lending.gate import Gate, GateTimeout, LaneGates, Outcome
from router.lending.state import LendingState
from router.lending.wire import OFFLOAD_RETURNED, Lent
from router.runtime import RuntimeView


class Helper:
    """The helper's side of one `Lending` service: every request served on this node."""

    def __init__(self, lending: LendingState) -> None:
        self.lending = lending

    def _lane_gates(self, lane: Lane) -> LaneGates | None:
        gates = self.lending.gates
        links = self.lending.links.links
        if links is not gates.links_seen:
            gates.refresh(links)
        return gates.lanes.get(lane.value)

    def ungated(self, lent: Lent | None, config: ModelConfig, lane: Lane) -> bool:
        """True when lending has nothing to do for this request here (most requests): an own
        request with no enrolled model on its lane, or with nothing of lending's on the lane
        that concerns it (no gate of its model, no borrowed work to hand back, no restore to
        cancel). Then the caller skips `serving`: an identity check and a dict lookup or two.
        `lent`: the owner's marks of a borrowed request (wire.parse_lent), None for an own one."""
        if lent is not None:
            return False
        lane_gates = self._lane_gates(lane)
        return lane_gates is None or (
            config.id not in lane_gates.gates
            and not lane_gates.borrowed_work
            and lane.value not in self.lending.restorer.before
        )

    @contextlib.asynccontextmanager
    async def serving(
        self, lent: Lent | None, config: ModelConfig, lane: Lane
    ) -> AsyncIterator[None]:
        """Around a request served here that `ungated` did not wave through: gated when its
        model is enrolled; a borrowed one is refused, handed back or counted as borrowed."""
        if lent is not None:
            async with self._borrowed(config, lane, lent):
                yield
            return
        lane_gates = self._lane_gates(lane)
        if lane_gates is None:
            yield
            return
        async with self._own(lane_gates, config, lane):
            yield

    @contextlib.asynccontextmanager
    async def _own(
        self, lane_gates: LaneGates, config: ModelConfig, lane: Lane
    ) -> AsyncIterator[None]:
        self.lending.restorer.own_arrived(lane.value)
        in_backend = lane_gates.admitted_borrowed
        owners = lane_gates.hand_back()
        # One row per owner whose work went back: the owner fields say whose, `returned` how
        # many of that owner's (an unnamed owner, from an older master, is the empty pair).
        for owner, count in Counter(owners).items():
            detail = {"returned": count, "borrowed_in_backend": in_backend}
            self._record("borrowed_returned", lane, config.id, detail, owner)
        if in_backend:  # admitted borrowed work finishes first
            detail = {"returned": len(owners), "borrowed_in_backend": in_backend}
            self._record("native_waited_behind_borrowed", lane, config.id, detail)
        gate = lane_gates.gates.get(config.id)
        if gate is None:
            yield
            return
        await self._enter(gate, config, borrowed=False)
        try:
            yield
        finally:
            gate.leave(borrowed=False)

    @contextlib.asynccontextmanager
    async def _borrowed(self, config: ModelConfig, lane: Lane, lent: Lent) -> AsyncIterator[None]:
        lending = self.lending
        runtimes, table = lending.runtimes, lending.links
        views = runtimes.views()
        held = lending.gates.lanes.get(lane.value)
        active = sum(v.leases for v in views if v.lane is lane)
        own = active + runtimes.queue_length(lane) - table.borrowed.get(lane.value, 0)
        if own > 0 or (held is not None and held.waiting_own > 0):
            raise Conflict(
                f"this node has its own {lane} work; the request goes back to its owner",
                code=OFFLOAD_RETURNED,
            )
        if not lent.allow_load and not any(v.config.id == config.id and v.ready for v in views):
            raise Conflict(
                f"{config.id!r} is not loaded and the link forbids a load", code=OFFLOAD_RETURNED
            )
        gate = lending.gates.mark(lane.value, config.id)
        restore = lending.restorer
        restore.borrowed_arrived(lane.value)
        try:
            await self._enter(gate, config, borrowed=True, owner=lent.owner)
        except BaseException:
            restore.borrowed_done(lane.value)
            raise
        before = lane_model(runtimes.views(), lane)
        restore.borrowed_admitted(
            lane.value,
            before,
            before.id if before else None,
            config.id,
            wanted=lent.restore,
        )
        table.borrowed[lane.value] = table.borrowed.get(lane.value, 0) + 1
        try:
            yield
        finally:
            table.borrowed[lane.value] -= 1
            gate.leave(borrowed=True)
            restore.borrowed_done(lane.value)

    async def _enter(
        self,
        gate: Gate,
        config: ModelConfig,
        *,
        borrowed: bool,
        owner: tuple[str, str] | None = None,
    ) -> None:
        bound = self.lending.settings.runtime.queue_timeout
        try:
            outcome = await gate.enter(borrowed=borrowed, bound=bound, owner=owner or ("", ""))
        except GateTimeout:
            if borrowed:
                raise Conflict(
                    f"waited {bound:g}s for {config.id}; the request goes back to its owner",
                    code=OFFLOAD_RETURNED,
                ) from None
            raise ServiceUnavailable(
                f"timed out after {bound:g}s waiting for {config.id} (runtime.queue_timeout)",
                retry_after=5.0,
            ) from None
        if outcome is Outcome.RETURNED:
            raise Conflict(
                "this node's own request came first; the request goes back to its owner",
                code=OFFLOAD_RETURNED,
            )

    def _record(
        self,
        outcome: str,
        lane: Lane,
        model_id: str,
        detail: dict[str, int],
        owner: tuple[str, str] = ("", ""),
    ) -> None:
        self.lending.decisions.record(
            Decision(
                # The owner is what the lending master named (X-Tensors-Offload-Owner); a
                # `native_waited_behind_borrowed` row names none: admitted work may be several's.
                kind="helper",
                outcome=outcome,
                lane=lane.value,
                owner_node_id=owner[0],
                owner_model_id=owner[1],
                helper_node_id=self.lending.node_id,
                helper_model_id=model_id,
                trigger="native_request",
                detail=dict(detail),
            )
        )

    def held(self, lane: Lane) -> tuple[int, int]:
        """(own, borrowed) requests waiting in this node's gates on `lane`."""
        return self.lending.gates.held(lane.value)

    def restore_pending(self, lane: Lane) -> str | None:
        config = self.lending.restorer.pending(lane.value)
        return config.id if config else None


def lane_model(views: Sequence[RuntimeView], lane: Lane) -> ModelConfig | None:
    """The model the lane serves now (loading or ready, not on its way out)."""
    return next((v.config for v in views if lane in v.occupies and v.active), None)
