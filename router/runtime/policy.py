"""The one decision of the runtime layer (pure: no I/O, no clock of its own): admission and
queue order, which runtime drains and stops for a waiting load, and which load is next, for
one lane, in both residency modes. The pump applies it; the queue ETA (eta.py) replays it.

A snapshot holds the lane's runtimes (`ResidentView`), its waiters in queue order, the time and
the policy. A runtime a waiting load must see gone first is a *victim* (`victim_since`: the
arrival of that load's oldest request): with one runtime per lane (`runtime.residency: lane`)
the lane's occupant is every load's forced victim; with several (`memory`) the victims are the
memory plan's. So one rule serves both modes:

- A request for a ready runtime that is no victim is granted at once (up to its in-flight cap).
- A victim keeps serving its own queue while its window is open: the load's oldest request
  has waited less than `max_batch_wait`, and no request for another model has been passed
  `max_bypass` times (a grant passes every older request for a model not in the lane). Then it
  drains, and stops once its last lease is released. An idle victim nobody else asks for stops
  at once; with `fifo` it serves only its requests queued ahead of the first other one.
- A runtime nobody needs to stop any more is let out of its drain; an unloading one stops when
  drained. Running work is never cancelled. A victim that drains while only batch requests
  wait for other models is let out of it for a person's request for it (`_newcomers`).
- A new runtime's first grants (`loaded_for`) keep to its in-flight cap; once its window is
  closed it still serves what fifo would (its requests ahead of every other model's) and
  what it was loaded for (`ready_at`) that is older than its window's request, then one more
  of what it was loaded for if that passes nobody passed before (`_grace`), then leaves.
- `load`: the oldest request's runtime that is not in the lane (the pump plans it); with
  `grouped`, the first overdue one of that class if any (the one a victim left for).

"Oldest" and "queue order" above mean the fair order (fair.py): interactive before batch, round
robin over callers within a class, callers over their cap left out. On top of it, two class
rules: a victim with an interactive request waiting for another model serves only its own
interactive requests; and a victim that an interactive request used less than
`interactive_guard` ago does not leave while only batch requests wait for other models (it
serves what it has; the pump decides again when the guard lapses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

from router.domain import ANONYMOUS, Caller
from router.runtime import fair

QueueOrder = Literal["grouped", "fifo"]


class Phase(Enum):
    EMPTY = "empty"  # nothing runs in the lane (or it failed / exited)
    LOADING = "loading"
    READY = "ready"
    STOPPING = "stopping"


@dataclass(frozen=True)
class WaiterView:
    key: str  # the runtime key the waiter needs
    enqueued_at: float
    bypassed: int = 0  # newer requests granted ahead of this one so far
    caller: Caller = ANONYMOUS  # who sent it: its class, fairness name and cap


@dataclass(frozen=True)
class ResidentView:
    key: str
    phase: Phase
    leases: int
    draining: bool  # takes no new leases (a victim's drain)
    free: int | None = None  # leases it can still take (None: no cap)
    victim_since: float | None = None  # a waiting load stops it; its oldest request's arrival
    unloading: bool = False  # an explicit or idle unload: stops when drained
    interactive_at: float | None = None  # when an interactive request last used it
    # A load that stops it waits for an interactive (or promoted) request, in any lane.
    urgent_victim: bool = False
    # When it became ready (the decision's clock): its requests queued before then are those
    # it was loaded for, and it serves them all, up to its in-flight cap, before it leaves.
    ready_at: float | None = None


@dataclass(frozen=True)
class Policy:
    max_batch_wait: float
    order: QueueOrder = "grouped"
    max_bypass: int | None = None  # None: the window alone bounds the batching
    interactive_guard: float = 0.0  # batch loads do not stop what interactive used this recently
    batch_promote_after: float | None = None  # a batch request this old competes as interactive


@dataclass(frozen=True)
class Snapshot:
    residents: Sequence[ResidentView]
    waiters: Sequence[WaiterView]
    now: float
    policy: Policy
    running: Mapping[str, int] = field(default_factory=dict)  # leases held per caller name
    served: Mapping[str, int] = field(default_factory=dict)  # per caller name: its last grant's
    # sequence number (the round robin's "least recently served", fair.py)


@dataclass(frozen=True)
class Decision:
    grant: tuple[tuple[int, str], ...] = ()  # (waiter index, runtime key), in serve (fair) order
    drain: frozenset[str] = frozenset()
    undrain: frozenset[str] = frozenset()
    stop: frozenset[str] = frozenset()
    load: str | None = None  # the key of the oldest request for a runtime not in the lane


def decide(snapshot: Snapshot) -> Decision:
    """The decision on the waiters in fair order (fair.serve_order); its grants are indexes
    into `snapshot.waiters`, listed in that order (the ETA's positions follow it)."""
    order = serve_order(snapshot)
    fair_snapshot = replace(snapshot, waiters=tuple(snapshot.waiters[i] for i in order))
    d = _decide(fair_snapshot)
    return replace(d, grant=tuple((order[j], key) for j, key in sorted(d.grant)))


def _decide(snapshot: Snapshot) -> Decision:
    waiters = snapshot.waiters
    present = {r.key for r in snapshot.residents}
    others = tuple(i for i, w in enumerate(waiters) if w.key not in present)
    grant: list[tuple[int, str]] = []
    drain: set[str] = set()
    undrain: set[str] = set()
    stop: set[str] = set()
    for r in snapshot.residents:
        if r.phase is not Phase.READY:
            continue
        if r.unloading:
            if r.leases == 0:
                stop.add(r.key)
            continue
        own = tuple(i for i, w in enumerate(waiters) if w.key == r.key)
        if r.victim_since is None or _shielded(r, others, snapshot):
            if r.draining:
                undrain.add(r.key)
            grant.extend((i, r.key) for i in _capped(own, r.free))
            continue
        served, leaves = _victim(r, own, others, snapshot)
        grant.extend((i, r.key) for i in served)
        if served and r.draining:
            undrain.add(r.key)
        if leaves and not r.draining:
            drain.add(r.key)
        if leaves and r.leases == 0:
            stop.add(r.key)
    load = waiters[_next_load(others, snapshot)].key if others else None
    return Decision(
        tuple(sorted(grant)), frozenset(drain), frozenset(undrain), frozenset(stop), load
    )


def _next_load(others: tuple[int, ...], snapshot: Snapshot) -> int:
    """The waiter whose runtime loads next: the first in fair order, but with `grouped` the
    first of its class that is overdue (its window closed or its bypass budget spent), since
    it is what made a victim leave. Without it the round robin could put the model that just
    left back at the head: it would load again while the overdue waiter is passed once more."""
    waiters, policy, now = snapshot.waiters, snapshot.policy, snapshot.now
    head = others[0]
    if policy.order == "fifo":
        return head
    promote = policy.batch_promote_after
    urgent = fair.urgent(waiters[head], now, promote)
    for i in others:
        w = waiters[i]
        spent = policy.max_bypass is not None and w.bypassed >= policy.max_bypass
        late = now - w.enqueued_at >= policy.max_batch_wait
        if fair.urgent(w, now, promote) == urgent and (spent or late):
            return i
    return head


def _shielded(r: ResidentView, others: tuple[int, ...], snapshot: Snapshot) -> bool:
    """A victim within its interactive guard while only batch requests wait for the loads
    that stop it (in this lane's queue, or, told by `urgent_victim`, in another lane's)."""
    policy, now = snapshot.policy, snapshot.now
    if r.urgent_victim or not fair.guarded(r.interactive_at, now, policy.interactive_guard):
        return False
    promote = policy.batch_promote_after
    return not any(fair.urgent(snapshot.waiters[i], now, promote) for i in others)


def _capped(indexes: tuple[int, ...], free: int | None) -> tuple[int, ...]:
    return indexes if free is None else indexes[: max(0, free)]


def _victim(
    r: ResidentView, own: tuple[int, ...], others: tuple[int, ...], snapshot: Snapshot
) -> tuple[tuple[int, ...], bool]:
    """(what a victim still serves, whether it leaves: drains, and stops once idle). `own`:
    its waiters in queue order, before its in-flight cap."""
    policy, waiters = snapshot.policy, snapshot.waiters
    assert r.victim_since is not None
    if r.draining:
        return _newcomers(r, own, others, snapshot)
    own = _same_class(own, others, snapshot)
    mine = _capped(own, r.free)
    if policy.order == "fifo":
        head = others[0] if others else len(waiters)
        ahead = tuple(i for i in mine if i < head)
        if ahead:
            return ahead, False
        # At the in-flight cap: its own older requests wait for it, the others behind them.
        return (), not any(w.key == r.key for w in waiters[:head])
    if r.leases == 0 and not mine:
        return (), True  # idle, and only others wait: swap now
    if snapshot.now - r.victim_since >= policy.max_batch_wait:
        return _leaving(r, own, others, snapshot)
    if policy.max_bypass is None:
        return mine, False
    # Judged before the in-flight cap: a victim at its cap whose next request passes nobody
    # over budget waits for its slot; leaving then would load another model and reload this
    # one for that request (found by tests/runtime/test_fair_order.py, max_bypass 0).
    within = _within_bypass(waiters, own, others, policy.max_bypass)
    if not within and any(waiters[i].bypassed >= policy.max_bypass for i in others):
        return _leaving(r, own, others, snapshot)
    return _capped(within, r.free), False  # none: running work goes on, the window may bring more


def _newcomers(
    r: ResidentView, own: tuple[int, ...], others: tuple[int, ...], snapshot: Snapshot
) -> tuple[tuple[int, ...], bool]:
    """A draining victim that only batch requests wait for other models for is let out of its
    drain for a person's request for it (or a promoted one's): the class order serves that
    request first anyway, and stopping would load the victim again for it (found by
    tests/runtime/test_fair_order.py, NEWCOMER). Within one class the drain holds, so the
    request it left for keeps its bounds; with no waiter in this lane (a load from another
    lane stops it) it stops."""
    now, promote = snapshot.now, snapshot.policy.batch_promote_after
    if not others or any(fair.urgent(snapshot.waiters[i], now, promote) for i in others):
        return (), True
    people = tuple(i for i in own if fair.urgent(snapshot.waiters[i], now, promote))
    return _capped(people, r.free), not people


def _leaving(
    r: ResidentView, own: tuple[int, ...], others: tuple[int, ...], snapshot: Snapshot
) -> tuple[tuple[int, ...], bool]:
    """A victim whose window closed or whose bypass budget is spent still serves, in turn, what
    fifo would (its requests ahead of every waiter for another model in fair order) and what it
    was loaded for (queued before it became ready) that is older than the request its window
    counts from: loaded_for() would have granted those at once but for the in-flight cap; then
    one more of what it was loaded for (`_grace`). Then it leaves. None of them goes ahead of
    a person waiting for it."""
    waiters, head = snapshot.waiters, others[0] if others else len(snapshot.waiters)
    if not own:
        return (), True
    ready_at, since = r.ready_at or 0.0, r.victim_since or 0.0
    promote, now = snapshot.policy.batch_promote_after, snapshot.now
    first = fair.urgent(waiters[own[0]], now, promote)
    kin = tuple(i for i in own if fair.urgent(waiters[i], now, promote) == first)
    due = tuple(i for i in kin if i < head or waiters[i].enqueued_at < min(ready_at, since))
    if not due:  # one grace grant for what it was loaded for: see _grace
        due = _grace(tuple(i for i in kin if waiters[i].enqueued_at < ready_at), others, snapshot)
    return _capped(due, r.free), not due


def _grace(kin: tuple[int, ...], others: tuple[int, ...], snapshot: Snapshot) -> tuple[int, ...]:
    """A leaving victim's next request of those it was loaded for (`kin`), if it passes no
    waiter for another model that was ever passed (at most `max_bypass`). Once every window has
    closed, the round robin can alternate callers whose requests alternate models, one load
    each (tests/runtime/test_fair_order.py, SWAPPING); a runtime loaded for several of them
    serves one more before it leaves. That grant passes the head: at most one per head."""
    cap = snapshot.policy.max_bypass
    grace = 1 if cap is None else min(1, cap)
    return _within_bypass(snapshot.waiters, kin[:1], others, grace)


def _same_class(
    mine: tuple[int, ...], others: tuple[int, ...], snapshot: Snapshot
) -> tuple[int, ...]:
    """With an interactive request waiting for another model, a victim serves only its own
    interactive requests: batching by model does not put batch work ahead of a person."""
    now, promote = snapshot.now, snapshot.policy.batch_promote_after
    if not any(fair.urgent(snapshot.waiters[i], now, promote) for i in others):
        return mine
    return tuple(i for i in mine if fair.urgent(snapshot.waiters[i], now, promote))


def _within_bypass(
    waiters: Sequence[WaiterView], mine: tuple[int, ...], others: tuple[int, ...], max_bypass: int
) -> tuple[int, ...]:
    """The prefix of `mine` that passes no older waiter for another model more than
    `max_bypass` times (a prefix keeps the runtime's own order)."""
    budget = {i: max_bypass - waiters[i].bypassed for i in others}
    granted: list[int] = []
    for m in mine:
        older = [i for i in budget if i < m]
        if any(budget[i] <= 0 for i in older):
            break
        for i in older:
            budget[i] -= 1
        granted.append(m)
    return tuple(granted)


def loaded_for(
    waiters: Sequence[WaiterView],
    key: str,
    order: QueueOrder,
    running: Mapping[str, int] | None = None,
    free: int | None = None,
    serve: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The waiters a runtime that just became ready serves first: those it was loaded for.

    They queued before it was ready, so the batch window of a later waiter for another model
    may have expired meanwhile; decide() would then stop the new runtime unused and load it
    again for the same waiters, forever. Grouped: every waiter for `key`; fifo: only those
    ahead of the first waiter for another model. Never a caller's requests over its cap
    (`running`: leases held per caller name), nor more than the runtime's `free` leases
    (`max_in_flight`): decide() serves the rest as leases end (`ResidentView.ready_at`).

    `serve`: the waiters' fair order (fair.serve_order, as decide() reads them); the firsts
    are taken in it, so a person who queued during the load goes before the batch request
    the load was for. Without it: the arrival order of those within their cap."""
    within = list(serve) if serve is not None else fair.eligible(waiters, running or {})
    if order == "fifo":
        head = next((p for p, i in enumerate(within) if waiters[i].key != key), len(within))
        within = within[:head]
    return _capped(tuple(i for i in within if waiters[i].key == key), free)


def bypasses(count: int, granted: Sequence[int]) -> list[int]:
    """How many of the `granted` indexes each of `count` waiters was passed by (queue order)."""
    return [sum(1 for g in granted if g > i) for i in range(count)]


def passed(snapshot: Snapshot, granted: Sequence[int]) -> list[int]:
    """`bypasses` in the fair order the decision read `snapshot` in: how many of `granted`
    (indexes into its waiters) went ahead of each waiter from behind it."""
    return fair.passed(serve_order(snapshot), len(snapshot.waiters), granted)


def serve_order(snapshot: Snapshot) -> list[int]:
    """The snapshot's eligible waiters in fair order (fair.serve_order), as decide() reads them."""
    promote = snapshot.policy.batch_promote_after
    counts = (snapshot.running, snapshot.served)
    return fair.serve_order(snapshot.waiters, snapshot.now, promote, counts)


def clock_deadlines(snapshot: Snapshot) -> tuple[float, ...]:
    """When the clock alone changes the decision besides a batch window: a guarded victim's
    interactive guard lapses, a waiting batch request is promoted (the pump decides again)."""
    policy, now = snapshot.policy, snapshot.now
    guard, promote = policy.interactive_guard, policy.batch_promote_after
    lapses = tuple(
        r.interactive_at + guard
        for r in snapshot.residents
        if r.victim_since is not None
        and r.interactive_at is not None
        and fair.guarded(r.interactive_at, now, guard)
    )
    if promote is None:
        return lapses
    return lapses + tuple(
        w.enqueued_at + promote for w in snapshot.waiters if not fair.urgent(w, now, promote)
    )


def victim_deadlines(residents: Sequence[ResidentView], max_batch_wait: float) -> tuple[float, ...]:
    """When the victims' batch windows close (the pump decides again then)."""
    return tuple(
        r.victim_since + max_batch_wait
        for r in residents
        if r.victim_since is not None and not r.draining
    )


__all__ = [
    "Decision",
    "Phase",
    "Policy",
    "QueueOrder",
    "ResidentView",
    "Snapshot",
    "WaiterView",
    "bypasses",
    "clock_deadlines",
    "decide",
    "loaded_for",
    "passed",
    "serve_order",
    "victim_deadlines",
]
