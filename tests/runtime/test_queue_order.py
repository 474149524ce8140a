"""Grouped and FIFO queue orders (issue 26), on the pure scheduler: no processes, no clocks.

A small discrete-time lane runs `decide()` as the manager does: grants take leases that end
after `service`, a load takes `load` seconds, a stop is instant, a runtime that becomes ready
first serves the requests it was loaded for (`loaded_for`, as the pump does), and each
later grant counts as a bypass on every older waiter (queues.Queues.note_grants).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from router.runtime.scheduler import (
    Decision,
    LaneView,
    Phase,
    QueueOrder,
    WaiterView,
    bypasses,
    decide,
    loaded_for,
)

W = WaiterView
STEP = 0.05


@dataclass
class Run:
    loads: int = 0
    waits: dict[int, float] = field(default_factory=dict)  # request id -> time waited
    granted: list[int] = field(default_factory=list)  # request ids in grant order


def simulate(
    arrivals: list[tuple[float, str]],
    order: QueueOrder,
    *,
    window: float = 5.0,
    max_bypass: int | None = 8,
    service: float = 1.0,
    load: float = 0.5,
) -> Run:
    run, t, active, ready_at, fresh = Run(), 0.0, None, 0.0, False
    running: list[float] = []
    queue: list[tuple[int, WaiterView]] = []  # (request id, view)
    pending = sorted(enumerate(arrivals), key=lambda p: (p[1][0], p[0]))
    for _ in range(20_000):
        while pending and pending[0][1][0] <= t:
            rid, (at, key) = pending.pop(0)
            queue.append((rid, W(key, at)))
        running = [end for end in running if end > t]
        phase = Phase.EMPTY if active is None else Phase.LOADING if t < ready_at else Phase.READY
        lane = LaneView(phase, active, len(running), False)
        views = [v for _, v in queue]
        d = decide(lane, views, t, window, order=order, max_bypass=max_bypass)
        if phase is Phase.READY and fresh:  # the manager's first grants after a load
            d, fresh = Decision(grant=loaded_for(views, str(active), order)), False
        elif d.grant:
            passed = bypasses(len(queue), d.grant)
            queue = [(rid, _passed(v, n)) for (rid, v), n in zip(queue, passed, strict=True)]
        if d.load:
            active, ready_at, run.loads, fresh = d.load, t + load, run.loads + 1, True
            continue
        if d.stop:
            active = None
            continue
        if d.grant:
            for i in d.grant:
                rid, view = queue[i]
                run.waits[rid] = t - view.enqueued_at
                run.granted.append(rid)
                running.append(t + service)
            queue = [q for i, q in enumerate(queue) if i not in d.grant]
            continue
        if not queue and not pending:
            return run
        t = round(t + STEP, 6)
    raise AssertionError("simulation did not finish")


def _passed(view: WaiterView, n: int) -> WaiterView:
    return WaiterView(view.key, view.enqueued_at, view.bypassed + n)


def alternating(n: int, gap: float) -> list[tuple[float, str]]:
    """Two clients, one asking for A and one for B, each sending a request every `gap`."""
    return [(i * gap, key) for i in range(n) for key in "AB"]


arrival_lists = st.lists(
    st.tuples(st.floats(0, 12).map(lambda x: round(x, 2)), st.sampled_from("ABC")),
    min_size=1,
    max_size=40,
)
bypass_bounds = st.one_of(st.none(), st.integers(0, 10))


@settings(deadline=None, max_examples=150)
@given(arrival_lists, bypass_bounds)
def test_grouped_never_switches_more_than_fifo(
    arrivals: list[tuple[float, str]], max_bypass: int | None
) -> None:
    grouped = simulate(arrivals, "grouped", max_bypass=max_bypass)
    fifo = simulate(arrivals, "fifo")
    assert grouped.loads <= fifo.loads


@settings(deadline=None, max_examples=150)
@given(arrival_lists, st.sampled_from(["grouped", "fifo"]), bypass_bounds)
def test_order_within_a_model_is_kept(
    arrivals: list[tuple[float, str]], order: QueueOrder, max_bypass: int | None
) -> None:
    run = simulate(arrivals, order, max_bypass=max_bypass)
    for key in "ABC":
        mine = [rid for rid in run.granted if arrivals[rid][1] == key]
        assert mine == sorted(mine, key=lambda rid: (arrivals[rid][0], rid))


# A busy model and one request for another: the batch window alone ends the batch.
BUSY_A = [(0.0, "A"), (0.01, "B"), *((0.5 * i, "A") for i in range(1, 21))]


@settings(deadline=None, max_examples=150)
@given(arrival_lists, bypass_bounds)
@example(BUSY_A, None)
@example(BUSY_A, 8)
def test_no_request_waits_longer_than_fifo_plus_the_window(
    arrivals: list[tuple[float, str]], max_bypass: int | None
) -> None:
    window, service, load = 2.0, 1.0, 0.5
    grouped = simulate(arrivals, "grouped", window=window, max_bypass=max_bypass)
    fifo = simulate(arrivals, "fifo", window=window)
    # One batch window, plus the running requests granted inside it (one service time) and
    # the time steps of the simulation itself.
    slack = service + load + 4 * STEP
    for rid, waited in grouped.waits.items():
        assert waited <= fifo.waits[rid] + window + slack, (rid, waited, fifo.waits[rid])


@settings(deadline=None, max_examples=150)
@given(arrival_lists)
def test_fifo_grants_in_arrival_order(arrivals: list[tuple[float, str]]) -> None:
    run = simulate(arrivals, "fifo")
    assert run.granted == sorted(run.granted, key=lambda rid: (arrivals[rid][0], rid))


def test_alternating_clients_grouped_loads_a_third_of_fifo_or_fewer() -> None:
    arrivals = alternating(12, 0.2)
    grouped, fifo = simulate(arrivals, "grouped"), simulate(arrivals, "fifo")
    assert grouped.loads * 3 <= fifo.loads, (grouped.loads, fifo.loads)


def test_max_bypass_hands_the_lane_over_after_that_many_newer_requests() -> None:
    ready = LaneView(Phase.READY, "a", 1, False)
    waiters = [W("b", 0, bypassed=6), W("a", 1), W("a", 2), W("a", 3)]
    assert decide(ready, waiters, 2, 30, max_bypass=8).grant == (1, 2)
    spent = [W("b", 0, bypassed=8), W("a", 1)]
    assert decide(ready, spent, 2, 30, max_bypass=8) == Decision(drain=True)
    # A request for the loaded model queued before the other one passes nobody.
    first = [W("a", 0), W("b", 1, bypassed=8)]
    assert decide(ready, first, 2, 30, max_bypass=8).grant == (0,)


def test_fifo_drains_as_soon_as_another_model_heads_the_queue() -> None:
    ready = LaneView(Phase.READY, "a", 1, False)
    assert decide(ready, [W("b", 0), W("a", 1)], 0.1, 30, order="fifo") == Decision(drain=True)
    assert decide(ready, [W("a", 0), W("b", 1)], 0.1, 30, order="fifo").grant == (0,)
    capped = LaneView(Phase.READY, "a", 1, False, free=0)
    assert decide(capped, [W("a", 0), W("b", 1)], 0.1, 30, order="fifo") == Decision()
    idle = LaneView(Phase.READY, "a", 0, False)
    assert decide(idle, [W("b", 0)], 0.1, 30, order="fifo") == Decision(drain=True, stop=True)


def test_bypasses_counts_the_newer_grants_per_waiter() -> None:
    assert bypasses(4, (1, 3)) == [2, 1, 1, 0]
    assert bypasses(2, ()) == [0, 0]
