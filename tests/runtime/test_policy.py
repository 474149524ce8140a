"""The one decision (router/runtime/policy.py) at its boundaries, with exact expected values, in
both residency modes: one runtime per lane is the lane's occupant as every other load's forced
victim (`scheduler.resident`), several per lane are victims by a memory plan. Each test names
the behaviour of test-audit section 7 it pins."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from router.domain import Lane
from router.runtime.eta import LaneState, Queued, Resident, estimate, lane_now, serve_steps
from router.runtime.eta import Policy as EtaPolicy
from router.runtime.policy import (
    Decision,
    Phase,
    Policy,
    ResidentView,
    Snapshot,
    WaiterView,
    decide,
    passed,
)
from router.runtime.queues import Queues, Waiter
from router.runtime.scheduler import LaneView, resident
from router.runtime.state import spec_for
from tests.support.configs import text_config

WAIT = 5.0


def _lane_mode(a: ResidentView, waiters: list[WaiterView]) -> ResidentView:
    """A as the lane's only runtime: its window opens with the oldest other waiter."""
    view = LaneView(a.phase, a.key, a.leases, a.draining, a.free)
    return resident(view, waiters)


def _both(a: ResidentView, waiters: list[WaiterView]) -> list[ResidentView]:
    """A in lane mode and in memory mode (victim of the load of the oldest other waiter)."""
    since = min(w.enqueued_at for w in waiters if w.key != a.key)
    memory = ResidentView(a.key, a.phase, a.leases, a.draining, a.free, victim_since=since)
    return [_lane_mode(a, waiters), memory]


READY_A = ResidentView("a", Phase.READY, leases=1, draining=False)


@pytest.mark.parametrize("mode", [0, 1], ids=["lane", "memory"])
def test_the_batch_window_closes_at_exactly_max_batch_wait(mode: int) -> None:
    waiters = [WaiterView("b", 0.0), WaiterView("a", 1.0)]
    a = _both(READY_A, waiters)[mode]
    before = decide(Snapshot((a,), waiters, WAIT - 0.001, Policy(WAIT)))
    assert before == Decision(grant=((1, "a"),), load="b")
    at = decide(Snapshot((a,), waiters, WAIT, Policy(WAIT)))
    assert at == Decision(drain=frozenset({"a"}), load="b")  # one lease runs: no stop yet


@pytest.mark.parametrize("mode", [0, 1], ids=["lane", "memory"])
def test_grants_count_the_bypasses_they_cause(mode: int) -> None:
    waiters = [WaiterView("b", 0.0), WaiterView("a", 1.0), WaiterView("a", 2.0)]
    waiters.append(WaiterView("a", 3.0))
    a = _both(READY_A, waiters)[mode]
    d = decide(Snapshot((a,), waiters, 4.0, Policy(WAIT, max_bypass=2)))
    assert d.grant == ((1, "a"), (2, "a"))  # the third waits: b was passed twice
    assert not d.drain


@pytest.mark.parametrize("mode", [0, 1], ids=["lane", "memory"])
def test_a_victims_window_honours_max_bypass(mode: int) -> None:
    # b was already passed once; a budget of 2 lets one more request for a go ahead of it.
    waiters = [WaiterView("b", 0.0, bypassed=1), WaiterView("a", 1.0), WaiterView("a", 2.0)]
    a = _both(READY_A, waiters)[mode]
    d = decide(Snapshot((a,), waiters, 3.0, Policy(WAIT, max_bypass=2)))
    assert d.grant == ((1, "a"),)
    spent = [WaiterView("b", 0.0, bypassed=2), WaiterView("a", 1.0), WaiterView("a", 2.0)]
    a = _both(READY_A, spent)[mode]
    d = decide(Snapshot((a,), spent, 3.0, Policy(WAIT, max_bypass=2)))
    assert d == Decision(drain=frozenset({"a"}), load="b")  # past the budget: it drains


def test_the_eta_replays_the_bypass_counts_the_scheduler_uses() -> None:
    # b has been passed max_bypass times: a takes no new request, the lane swaps to b first.
    queued = [Queued("b@text", "b", 0.0, bypassed=2), Queued("a@text", "a", 1.0)]
    queued.append(Queued("a@text", "a", 2.0))
    lane = lane_now(LaneView(Phase.READY, "a@text", 0, False), "a")
    policy = EtaPolicy(WAIT, max_bypass=2)
    steps = serve_steps(lane, queued, 3.0, policy)
    assert [s.index for s in steps if s.kind == "serve"] == [0, 1, 2]
    rows = estimate(lane, queued, 3.0, policy, {"a": 2.0, "b": 3.0}, {"a": 1.0, "b": 1.0})
    # Both a requests are granted together once a is back and run at once (issue 32's cost
    # model: requests granted together), so the second one waits no longer than the first.
    assert [(r["model"], r["eta_s"]) for r in rows] == [("b", 3.0), ("a", 6.0), ("a", 6.0)]
    # One bypass short of the limit, the loaded model's requests go first.
    queued[0] = Queued("b@text", "b", 0.0, bypassed=0)
    rows = estimate(lane, queued, 3.0, policy, {"a": 2.0, "b": 3.0}, {"a": 1.0, "b": 1.0})
    # (both at once, no in-flight cap: b's load begins after 1 s, not 2)
    assert [(r["model"], r["eta_s"]) for r in rows] == [("a", 0.0), ("a", 0.0), ("b", 4.0)]


def test_the_eta_replays_memory_mode_victims() -> None:
    # Several per lane, a busy with one request and b's window long closed.
    queued = [Queued("b@text", "b", 0.0), Queued("a@text", "a", 1.0)]
    a = Resident(ResidentView("a@text", Phase.READY, 1, False), "a")
    loads, per = {"a": 2.0, "b": 3.0}, {"a": 1.0, "b": 1.0}
    # b loads next to a (no victims): a's request is granted at once, b after its load.
    alongside = LaneState((a,), {"b@text": frozenset()})
    rows = estimate(alongside, queued, 10.0, EtaPolicy(WAIT), loads, per)
    assert [(r["model"], r["eta_s"]) for r in rows] == [("a", 0.0), ("b", 4.0)]
    # a is b's victim (room for one; the pump pended b when it queued): a drains (1 s), b loads (3 s) and serves (1 s), then a
    # loads again (2 s) for its request.
    victim = Resident(ResidentView("a@text", Phase.READY, 1, False, victim_since=0.0), "a")
    evicting = LaneState((victim,), {"b@text": frozenset({"a@text"})})
    rows = estimate(evicting, queued, 10.0, EtaPolicy(WAIT), loads, per)
    assert [(r["model"], r["eta_s"]) for r in rows] == [("b", 4.0), ("a", 7.0)]


def test_a_runtime_that_stops_being_a_victim_leaves_its_drain() -> None:
    draining = ResidentView("a", Phase.READY, leases=1, draining=True)
    waiters = [WaiterView("a", 1.0)]
    d = decide(Snapshot((draining,), waiters, 2.0, Policy(WAIT)))
    assert d == Decision(grant=((0, "a"),), undrain=frozenset({"a"}))


async def test_grants_count_the_bypasses_across_decisions(tmp_path: Path) -> None:
    """Three newer requests for the loaded model arrive one by one behind b (`max_bypass: 2`):
    the queue counts each grant on b, so the third waits and the lane drains."""
    config = text_config(tmp_path)
    loop = asyncio.get_running_loop()
    spec_a = spec_for(config, Lane.TEXT)
    spec_b = spec_for(replace(config, id="b"), Lane.TEXT)
    queues = Queues()
    b = Waiter(spec_b, 0.0, Lane.TEXT, loop.create_future())
    queues.add(b)
    granted = []
    for n in range(3):
        queues.add(Waiter(spec_a, 1.0 + n, Lane.TEXT, loop.create_future()))
        waiters = queues.scheduler_view(Lane.TEXT)
        a = resident(LaneView(Phase.READY, spec_a.key, 1, False), waiters)
        snapshot = Snapshot((a,), waiters, 4.0, Policy(WAIT, max_bypass=2))
        d = decide(snapshot)
        entries = queues.entries(Lane.TEXT)
        queues.note_grants(entries, passed(snapshot, [i for i, _ in d.grant]))
        for i, _ in d.grant:
            entries[i].future.cancel()  # granted: gone from the queue
        granted.append((len(d.grant), bool(d.drain)))
    assert granted == [(1, False), (1, False), (0, True)]
    assert b.bypassed == 2
