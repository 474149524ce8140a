"""The fair order of one lane's waiters (pure: no I/O, no clock of its own), the input side of
the one decision (policy.py), which reads its waiters in this order (docs/residency.md, "Who
goes first"):

- Class: waiting `interactive` requests go before `batch` ones. A batch request that has waited
  `runtime.batch_promote_after` competes as interactive from then on, so a steady interactive
  stream cannot hold it back for ever.
- Fairness within a class: round robin over the callers (a scoped key's name; every request no
  key identifies shares the name ""). A caller's n-th waiting request (in its own arrival order)
  goes in round n; within a round, the caller served least recently first (then the older
  request). So a caller with 40 waiting has at most one request ahead of a newcomer's first,
  and two callers that both wait take turns.
- A caller's cap (`max_concurrent`): its requests beyond the cap, counting its running ones,
  are left out of this decision (they wait, and never block the callers behind them).

With one caller (no scoped keys) this order is the arrival order, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from router.domain import Caller, Priority


class Waiting(Protocol):
    """What the order reads of a waiter (policy.WaiterView)."""

    @property
    def enqueued_at(self) -> float: ...

    @property
    def caller(self) -> Caller: ...


def urgent(waiter: Waiting, now: float, promote_after: float | None) -> bool:
    """Served in the interactive class: an interactive caller's, or a batch request that has
    waited `promote_after` seconds."""
    if waiter.caller.priority is Priority.INTERACTIVE:
        return True
    return promote_after is not None and now - waiter.enqueued_at >= promote_after


def eligible(waiters: Sequence[Waiting], running: Mapping[str, int]) -> list[int]:
    """The indexes of the waiters within their caller's cap, in the given (arrival) order."""
    taken: dict[str, int] = {}
    out: list[int] = []
    for i, w in enumerate(waiters):
        name, cap = w.caller.name, w.caller.max_concurrent
        count = taken.get(name, running.get(name, 0))
        if cap is not None and count >= cap:
            continue
        taken[name] = count + 1
        out.append(i)
    return out


def serve_order(
    waiters: Sequence[Waiting],
    now: float,
    promote_after: float | None,
    counts: tuple[Mapping[str, int], Mapping[str, int]],
) -> list[int]:
    """The eligible waiters' indexes in serve order: class, round, the caller's last grant
    (least recent first), arrival. `counts`: per caller name, the leases it holds and the
    sequence number of its last grant (never served: none)."""
    running, served = counts
    rounds: dict[str, int] = {}
    keyed: list[tuple[int, int, int, float, int]] = []
    for i in eligible(waiters, running):
        w = waiters[i]
        name = w.caller.name
        turn = rounds.get(name, 0)
        rounds[name] = turn + 1
        rank = 0 if urgent(w, now, promote_after) else 1
        keyed.append((rank, turn, served.get(name, -1), w.enqueued_at, i))
    return [i for *_, i in sorted(keyed)]


def passed(order: Sequence[int], count: int, granted: Sequence[int]) -> list[int]:
    """How many of the `granted` waiters went ahead of each of `count` waiters while behind it
    in serve `order` (the `max_bypass` count); a waiter left out of the order is passed by none."""
    place = {i: p for p, i in enumerate(order)}
    later = [place[g] for g in granted]
    return [sum(1 for p in later if p > place[i]) if i in place else 0 for i in range(count)]


def guarded(interactive_at: float | None, now: float, guard: float) -> bool:
    """An interactive request used a runtime less than `guard` seconds ago: no load for a
    batch request stops it (runtime.interactive_guard)."""
    return interactive_at is not None and now < interactive_at + guard


__all__ = ["Waiting", "eligible", "guarded", "passed", "serve_order", "urgent"]
