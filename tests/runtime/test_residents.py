"""The one decision (router/runtime/policy.py) over random lanes and queues (hypothesis), in
both residency modes at once: each lane is drawn either as `runtime.residency: lane` (at most one
runtime, the occupant being every other load's forced victim, as scheduler.resident builds it)
or as `memory` (several runtimes, victims by a memory plan). Running work is never cancelled,
only victims drain or stop (no thrash: a resident model is never loaded again, a request for a
ready resident is never held back by another model's load), and a victim serves its own queue
within its window."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from router.runtime.policy import (
    Decision,
    Phase,
    Policy,
    QueueOrder,
    ResidentView,
    Snapshot,
    WaiterView,
    decide,
    victim_deadlines,
)
from router.runtime.scheduler import LaneView, resident

KEYS = ("a", "b", "c", "d")
WAIT = 10.0


def decide_many(
    residents: list[ResidentView],
    waiters: list[WaiterView],
    now: float,
    max_batch_wait: float,
    *,
    order: QueueOrder = "grouped",
    max_bypass: int | None = None,
) -> Decision:
    """The decision on one snapshot of the lane."""
    rules = Policy(max_batch_wait, order, max_bypass)
    return decide(Snapshot(residents, waiters, now, rules))


@st.composite
def _resident_view(draw: st.DrawFn, key: str) -> ResidentView:
    return ResidentView(
        key,
        draw(st.sampled_from(list(Phase)[1:])),  # loading, ready, stopping
        draw(st.integers(0, 3)),
        draw(st.booleans()),
        draw(st.one_of(st.none(), st.integers(0, 2))),
        draw(st.one_of(st.none(), st.floats(0, 30))),
        draw(st.booleans()),
    )


@st.composite
def lanes(draw: st.DrawFn) -> tuple[list[ResidentView], list[WaiterView], float]:
    """A lane in either residency mode (drawn): `lane` holds at most one runtime whose victim
    window is the oldest other waiter's arrival; `memory` holds up to three with any victims."""
    waiters = draw(
        st.lists(
            st.builds(WaiterView, st.sampled_from(KEYS), st.floats(0, 30), st.integers(0, 10)),
            max_size=8,
        )
    )
    waiters.sort(key=lambda w: w.enqueued_at)
    now = draw(st.floats(0, 60))
    if draw(st.sampled_from(["lane", "memory"])) == "lane":
        keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=1))
        views = [draw(_resident_view(key)) for key in keys]
        occupants = [
            replace(
                resident(LaneView(v.phase, v.key, v.leases, v.draining, v.free), waiters),
                unloading=v.unloading,
            )
            for v in views
        ]
        return occupants, waiters, now
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=3))
    return [draw(_resident_view(key)) for key in keys], waiters, now


@given(lanes(), st.sampled_from(["grouped", "fifo"]))
def test_only_victims_and_unloads_drain_and_nothing_running_stops(lane, order) -> None:  # type: ignore[no-untyped-def]
    residents, waiters, now = lane
    d = decide_many(residents, waiters, now, WAIT, order=order, max_bypass=4)
    by_key = {r.key: r for r in residents}
    for key in d.stop:
        r = by_key[key]
        assert r.leases == 0 and r.phase is Phase.READY  # never a runtime with work in flight
        assert r.victim_since is not None or r.unloading
    for key in d.drain:
        assert by_key[key].victim_since is not None
    for key in d.undrain:
        assert by_key[key].victim_since is None and by_key[key].draining


@given(lanes(), st.sampled_from(["grouped", "fifo"]))
def test_grants_go_to_ready_residents_in_queue_order(lane, order) -> None:  # type: ignore[no-untyped-def]
    residents, waiters, now = lane
    d = decide_many(residents, waiters, now, WAIT, order=order, max_bypass=4)
    by_key = {r.key: r for r in residents}
    indexes = [i for i, _ in d.grant]
    assert indexes == sorted(set(indexes))
    for i, key in d.grant:
        r = by_key[key]
        assert waiters[i].key == key and r.phase is Phase.READY and not r.unloading
        assert r.free is None or sum(1 for _, k in d.grant if k == key) <= r.free
        if r.victim_since is not None:  # a victim serves its own queue only within its window
            assert not r.draining
            if order == "grouped" and now - r.victim_since < WAIT:
                continue
            # Fifo, and grouped once the window has closed (issue 35's leaving rule): only its
            # requests queued ahead of the first one for another model, or one it was loaded
            # for (queued before it became ready) that the in-flight cap held back.
            present = {r.key for r in residents}
            head = next((j for j, w in enumerate(waiters) if w.key not in present), None)
            loaded_for = r.ready_at is not None and waiters[i].enqueued_at < r.ready_at
            assert head is None or i < head or (order == "grouped" and loaded_for)


@given(lanes())
def test_no_thrash(lane) -> None:  # type: ignore[no-untyped-def]
    """A resident model is never loaded again, and a request for a ready resident that no load
    wants gone is served at once whatever else waits."""
    residents, waiters, now = lane
    d = decide_many(residents, waiters, now, WAIT)
    present = {r.key for r in residents}
    assert d.load is None or d.load not in present
    if d.load is not None:
        assert d.load == next(w.key for w in waiters if w.key not in present)
    granted = {i for i, _ in d.grant}
    for r in residents:
        if r.phase is Phase.READY and r.victim_since is None and not r.unloading and r.free is None:
            assert {i for i, w in enumerate(waiters) if w.key == r.key} <= granted


def test_a_busy_victim_serves_its_queue_then_drains() -> None:
    victim = ResidentView("a", Phase.READY, 1, False, victim_since=0.0)
    queue = [WaiterView("b", 0.0), WaiterView("a", 1.0)]
    inside = decide_many([victim], queue, 5.0, WAIT)
    assert inside.grant == ((1, "a"),) and not inside.drain and inside.load == "b"
    after = decide_many([victim], queue, WAIT, WAIT)
    assert after.grant == () and after.drain == {"a"} and not after.stop
    idle = decide_many([ResidentView("a", Phase.READY, 0, True, victim_since=0.0)], queue, 11, WAIT)
    assert idle.stop == {"a"}
    assert victim_deadlines([victim], WAIT) == (WAIT,)
