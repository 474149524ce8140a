"""The admission gate of an enrolled model (docs/lending.md, "Enrolment and the gate").

A model that is the owner or the helper of a link ("enrolled") lets at most
`cluster.scheduling_backend_depth` requests into the backend at once; the rest wait here, in
the router, where they can still be lent (owner) or handed back (helper). Waiters are admitted
OWN requests first, then BORROWED ones, each in arrival order. When an own request arrives on
a lane, every borrowed request waiting in that lane's gates is handed back at once; borrowed
requests already admitted finish.

`admissions` and `handed_back` are the pure ordering rules; `Gate` and `LaneGates` hold the
waiters (asyncio futures, no I/O). The depth is read through a callable at every decision,
because the WebUI replaces the lending values at run time.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from router.lending.links import Link


@dataclass(frozen=True, slots=True)
class Held:
    """One waiter as the ordering rules see it."""

    seq: int  # arrival order within the node
    borrowed: bool
    owner: tuple[str, str] = ("", "")  # a borrowed request's lending owner (node, model), if named


def admissions(waiting: Sequence[Held], admitted: int, depth: int) -> tuple[Held, ...]:
    """The waiters to admit now, given `admitted` already in the backend: own before
    borrowed, each kind in arrival order, never more than `depth` admitted in all."""
    room = max(0, max(1, depth) - admitted)
    if room == 0 or not waiting:
        return ()
    return tuple(sorted(waiting, key=lambda h: (h.borrowed, h.seq))[:room])


def handed_back(waiting: Iterable[Held]) -> tuple[Held, ...]:
    """An own request arrived: every borrowed waiter goes back to its owner."""
    return tuple(h for h in waiting if h.borrowed)


class Outcome(enum.Enum):
    ADMITTED = "admitted"
    RETURNED = "returned"  # handed back to the owner before it was admitted


class GateTimeout(Exception):
    """The request waited its whole bound in the gate."""


_SEQ = itertools.count()


@dataclass(eq=False)
class _Waiter:
    held: Held
    future: asyncio.Future[Outcome] = field(repr=False)


class Gate:
    """One enrolled model's gate on this node."""

    def __init__(self, lane: str, model_id: str, depth: Callable[[], int]) -> None:
        self.lane, self.model_id = lane, model_id
        self._depth = depth
        self.admitted = 0
        self.admitted_borrowed = 0
        self.waiting_borrowed = 0
        self._waiting: dict[int, _Waiter] = {}  # by seq, in arrival order

    @property
    def waiting_own(self) -> int:
        return len(self._waiting) - self.waiting_borrowed

    @property
    def idle(self) -> bool:
        return self.admitted == 0 and not self._waiting

    async def enter(
        self, *, borrowed: bool, bound: float, owner: tuple[str, str] = ("", "")
    ) -> Outcome:
        """Wait for admission (ADMITTED: call `leave` when done) or a hand back (RETURNED).

        Raises GateTimeout after `bound` seconds (0: no bound); a cancelled caller (the
        client went away) leaves the queue, and a slot granted in the same instant is freed.
        """
        held = Held(next(_SEQ), borrowed, owner)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(held, future)
        self._waiting[held.seq] = waiter
        self.waiting_borrowed += borrowed
        self._pump()
        if future.done():
            return future.result()
        try:
            # Not wait_for: on 3.11 it swallows a cancel that lands as the slot is granted.
            async with asyncio.timeout(bound or None):
                return await asyncio.shield(future)
        except TimeoutError:
            self._abandon(waiter)
            raise GateTimeout from None
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise

    def leave(self, *, borrowed: bool) -> None:
        """An admitted request is done with the backend."""
        self.admitted -= 1
        if borrowed:
            self.admitted_borrowed -= 1
        self._pump()

    def hand_back(self) -> tuple[tuple[str, str], ...]:
        """Answer every borrowed waiter RETURNED; the owner of each, in arrival order."""
        back = handed_back(w.held for w in self._waiting.values())
        for held in back:
            self._take(held.seq).future.set_result(Outcome.RETURNED)
        return tuple(held.owner for held in back)

    def _pump(self) -> None:
        held = [w.held for w in self._waiting.values()]
        for chosen in admissions(held, self.admitted, self._depth()):
            waiter = self._take(chosen.seq)
            self.admitted += 1
            if chosen.borrowed:
                self.admitted_borrowed += 1
            waiter.future.set_result(Outcome.ADMITTED)

    def _take(self, seq: int) -> _Waiter:
        waiter = self._waiting.pop(seq)
        self.waiting_borrowed -= waiter.held.borrowed
        return waiter

    def _abandon(self, waiter: _Waiter) -> None:
        if waiter.held.seq in self._waiting:
            self._take(waiter.held.seq)
        future = waiter.future
        if not future.done():
            future.cancel()
        elif future.result() is Outcome.ADMITTED:
            self.leave(borrowed=waiter.held.borrowed)  # granted as the caller gave up
            return
        self._pump()


class LaneGates:
    """The gates of one lane on this node: an own request on the lane hands back the
    borrowed waiters of every gate in it."""

    def __init__(self, lane: str) -> None:
        self.lane = lane
        self.gates: dict[str, Gate] = {}

    def hand_back(self) -> tuple[tuple[str, str], ...]:
        """Every gate's borrowed waiters handed back: their owners, gate by gate."""
        return tuple(owner for gate in self.gates.values() for owner in gate.hand_back())

    @property
    def waiting_own(self) -> int:
        return sum(g.waiting_own for g in self.gates.values())

    @property
    def waiting_borrowed(self) -> int:
        return sum(g.waiting_borrowed for g in self.gates.values())

    @property
    def admitted_borrowed(self) -> int:
        return sum(g.admitted_borrowed for g in self.gates.values())

    @property
    def idle(self) -> bool:
        return all(g.idle for g in self.gates.values())

    @property
    def borrowed_work(self) -> bool:
        """Any borrowed request waiting or admitted in the lane's gates."""
        return any(g.admitted_borrowed or g.waiting_borrowed for g in self.gates.values())


class Gates:
    """Every gate on this node, by lane then model. Enrolment comes from the link table
    (recomputed only when its tuple is replaced) and from borrowed work received: a model
    that is lent work here is enrolled here from then on."""

    def __init__(self, node_id: str, depth: Callable[[], int]) -> None:
        self.node_id = node_id
        self._depth = depth
        self.lanes: dict[str, LaneGates] = {}
        self.links_seen: object = None  # the link tuple the enrolment was computed from
        self._marked: set[tuple[str, str]] = set()

    def refresh(self, links: Sequence[Link]) -> None:
        """Enrol this node's owners and helpers of `links` (gates of models no longer
        enrolled stay while busy, so no admitted request loses its slot)."""
        self.links_seen = links
        wanted = set(self._marked)
        for link in links:
            if link.owner_node_id == self.node_id:
                wanted.add((link.lane, link.owner_model_id))
            if link.helper_node_id == self.node_id:
                wanted.add((link.lane, link.helper_model_id))
        for lane, lane_gates in list(self.lanes.items()):
            for model_id, gate in list(lane_gates.gates.items()):
                if (lane, model_id) not in wanted and gate.idle:
                    del lane_gates.gates[model_id]
            if not lane_gates.gates:
                del self.lanes[lane]
        for lane, model_id in wanted:
            self._gate(lane, model_id)

    def waiting_own(self, lane: str, model_id: str) -> int:
        """Own requests of `model_id` released by their holder, not yet admitted by its gate."""
        lane_gates = self.lanes.get(lane)
        gate = lane_gates.gates.get(model_id) if lane_gates is not None else None
        return gate.waiting_own if gate is not None else 0

    def held(self, lane: str) -> tuple[int, int]:
        """(own, borrowed) requests waiting in this node's gates on `lane`."""
        lane_gates = self.lanes.get(lane)
        return (lane_gates.waiting_own, lane_gates.waiting_borrowed) if lane_gates else (0, 0)

    def mark(self, lane: str, model_id: str) -> Gate:
        """`model_id` receives borrowed work: enrolled here."""
        self._marked.add((lane, model_id))
        return self._gate(lane, model_id)

    def _gate(self, lane: str, model_id: str) -> Gate:
        lane_gates = self.lanes.get(lane)
        if lane_gates is None:
            lane_gates = self.lanes[lane] = LaneGates(lane)
        gate = lane_gates.gates.get(model_id)
        if gate is None:
            gate = lane_gates.gates[model_id] = Gate(lane, model_id, self._depth)
        return gate
