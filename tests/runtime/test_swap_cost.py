"""Issue 32: what a swap costs (router/runtime/swap_cost.py), and the ETA replay counting it."""

from __future__ import annotations

from router.runtime.eta import (
    LaneState,
    Policy,
    Queued,
    Resident,
    Step,
    lane_now,
    ranked,
    step_seconds,
)
from router.runtime.policy import ResidentView
from router.runtime.scheduler import LaneView, Phase
from router.runtime.swap_cost import (
    Evicted,
    Timings,
    drain_seconds,
    eviction_seconds,
    load_seconds,
    swap_seconds,
)

FULL = Timings(
    load={"a": 4.0, "b": 6.0},
    request={"a": 1.5, "b": 2.5},
    save={"a": 0.5, "b": 0.75},
    stop={"a": 0.25, "b": 1.0},
    restore={"a": 0.125, "b": 0.375},
)
GROUPED = Policy(max_batch_wait=30.0, order="grouped", max_bypass=8)


def q(model: str, at: float) -> Queued:
    return Queued(f"{model}@text", model, at)


def test_the_drain_is_what_the_youngest_running_request_has_left() -> None:
    assert drain_seconds(FULL, "a", 3, 0.5) == 1.0  # three at once: 1.5 - 0.5
    assert drain_seconds(FULL, "a", 1, 9.0) == 0.0  # over its usual time: ends any moment
    assert drain_seconds(FULL, "a", 0, 0.0) == 0.0
    assert drain_seconds(FULL, "c", 1, 0.0) is None  # c never served a request


def test_an_eviction_drains_saves_and_stops_each_victim_at_once() -> None:
    a = Evicted("a", running=2, running_for=0.5)  # 1.0 drain + 0.5 save + 0.25 stop
    b = Evicted("b")  # idle: 0.75 save + 1.0 stop
    assert eviction_seconds(FULL, [a]) == 1.75
    assert eviction_seconds(FULL, [a, b]) == 1.75  # they leave at once: the slowest
    assert eviction_seconds(FULL, [Evicted("b", running=1)]) == 4.25
    assert eviction_seconds(FULL, [Evicted("b", stopping_for=0.5)]) == 1.25  # under way
    assert eviction_seconds(FULL, [Evicted("b", stopping_for=9.0)]) == 0.0
    assert eviction_seconds(FULL, []) == 0.0
    assert eviction_seconds(FULL, [a, Evicted("c")]) is None  # c's stop never measured


def test_a_load_counts_its_restore_and_only_what_is_left() -> None:
    assert load_seconds(FULL, "b") == 6.375
    assert load_seconds(FULL, "b", 2.0) == 4.375
    assert load_seconds(FULL, "c") is None
    off = Timings(load={"b": 6.0}, request={})  # KV persistence off: no save, no restore
    assert load_seconds(off, "b") == 6.0
    assert eviction_seconds(off, [Evicted("a")]) == 0.0  # and stops not counted


def test_a_whole_swap_adds_the_eviction_and_the_load() -> None:
    victims = [Evicted("a", running=1), Evicted("b")]  # a: 1.5 + 0.75, b: 1.75
    assert swap_seconds(FULL, victims, "b") == 2.25 + 6.375
    no_stop = Timings(FULL.load, FULL.request, FULL.save, {"a": 0.25}, FULL.restore)
    assert swap_seconds(no_stop, victims, "b") is None  # b's stop never measured


def test_each_replayed_step_costs_what_the_model_says() -> None:
    assert step_seconds(Step("serve", "b", index=0), FULL) == 2.5
    assert step_seconds(Step("drain", "a", count=2), FULL, running_for=1.0) == 0.5
    load = Step("load", "b", evicts=(Evicted("a"),))
    assert step_seconds(load, FULL) == 0.75  # a's save and stop
    assert step_seconds(Step("finish_load", "b", elapsed=1.0), FULL) == 5.375


def test_lane_mode_eta_counts_drain_save_stop_load_and_restore() -> None:
    busy = lane_now(LaneView(Phase.READY, "a@text", 2, False), "a", running_for=0.5)
    rows = ranked(busy, [q("b", 0), q("b", 1)], 40.0, GROUPED, {}, {}, FULL)
    # drain 1.0 + a's save 0.5 + stop 0.25 + b's load 6.0 + restore 0.375 = 8.125; both b
    # requests are granted together once b is ready.
    assert [r["eta_s"] for _, r in rows] == [8.1, 8.1]
    capped = Policy(30.0, "grouped", 8, max_in_flight=1)  # one at a time: the second waits
    rows = ranked(busy, [q("b", 0), q("b", 1)], 40.0, capped, {}, {}, FULL)
    assert [r["eta_s"] for _, r in rows] == [8.1, 10.6]


def test_lane_mode_eta_during_a_stop_counts_what_is_left_of_it() -> None:
    stopping = lane_now(LaneView(Phase.STOPPING, "b@text", 0, False), "b", stopping_for=1.5)
    rows = ranked(stopping, [q("a", 0)], 40.0, GROUPED, {}, {}, FULL)
    assert [r["eta_s"] for _, r in rows] == [4.4]  # b's 1.75 less 1.5 is 0.25, then a's load 4.125


def test_a_later_swap_in_the_replay_stops_the_model_loaded_before() -> None:
    busy = lane_now(LaneView(Phase.READY, "a@text", 0, False), "a")
    rows = ranked(busy, [q("b", 0), q("a", 1)], 40.0, Policy(30.0, "fifo"), {}, {}, FULL)
    # b: a's save and stop 0.75, b's load 6.375 = 7.125; a: b served 2.5, b's save and stop
    # 1.75, a's load 4.125 = 15.5.
    assert [(r["model"], r["eta_s"]) for _, r in rows] == [("b", 7.1), ("a", 15.5)]


def test_memory_mode_eta_waits_for_the_victims_of_the_replayed_decision() -> None:
    # Several runtimes per lane: a (one request running for 1 s) and c (idle) stay loaded;
    # b's load must see a gone (its plan's victims), or a and c for the second lane.
    a = Resident(ResidentView("a@text", Phase.READY, 1, False), "a", running_for=1.0)
    c = Resident(ResidentView("c@text", Phase.READY, 0, False), "c")
    one = LaneState((a, c), {"b@text": frozenset({"a@text"})})
    rows = ranked(one, [q("b", 0)], 40.0, GROUPED, {}, {}, FULL)
    assert [r["eta_s"] for _, r in rows] == [7.6]  # a drains 0.5, leaves 0.75; b loads 6.375
    both = LaneState((a, c), {"b@text": frozenset({"a@text", "c@text"})})
    rows = ranked(both, [q("b", 0)], 40.0, GROUPED, {}, {}, FULL)
    assert [r["eta_s"] for _, r in rows] == [None]  # c's save and stop were never measured


SLEEPY = Timings(
    load=FULL.load,
    request=FULL.request,
    save=FULL.save,
    stop=FULL.stop,
    restore=FULL.restore,
    sleep={"a": 0.125, "b": 0.25},
    wake={"a": 0.5, "b": 1.5},
)


def test_a_vllm_sleep_is_priced_instead_of_a_save_and_stop() -> None:
    assert eviction_seconds(SLEEPY, [Evicted("a", sleeps=True)]) == 0.125  # not 0.5 + 0.25
    assert eviction_seconds(SLEEPY, [Evicted("a", running=1, sleeps=True)]) == 1.625
    assert eviction_seconds(SLEEPY, [Evicted("b", stopping_for=0.125, sleeps=True)]) == 0.125
    assert eviction_seconds(FULL, [Evicted("a", sleeps=True)]) is None  # never measured


def test_a_vllm_wake_is_priced_instead_of_a_load_and_restore() -> None:
    assert load_seconds(SLEEPY, "b", woken=True) == 1.5  # not 6.0 + 0.375
    assert load_seconds(SLEEPY, "b", 1.0, woken=True) == 0.5
    assert load_seconds(FULL, "b", woken=True) is None  # no wake measured
    victims = [Evicted("a", sleeps=True)]
    assert swap_seconds(SLEEPY, victims, "b", woken=True) == 0.125 + 1.5
    assert step_seconds(Step("finish_load", "b", woken=True), SLEEPY) == 1.5


def test_the_eta_replay_puts_to_sleep_and_wakes() -> None:
    view = ResidentView("a@text", Phase.READY, 0, False)
    sleeper = LaneState((Resident(view, "a", sleeps=True),), exclusive=True)
    rows = ranked(sleeper, [q("b", 0)], 40.0, GROUPED, {}, {}, SLEEPY)
    assert [r["eta_s"] for _, r in rows] == [6.5]  # a sleeps 0.125, b loads 6.375
    asleep = LaneState(
        (Resident(view, "a", sleeps=True),), exclusive=True, asleep=frozenset({"b@text"})
    )
    rows = ranked(asleep, [q("b", 0)], 40.0, GROUPED, {}, {}, SLEEPY)
    assert [r["eta_s"] for _, r in rows] == [1.6]  # a sleeps 0.125, b wakes 1.5
    waking = Resident(ResidentView("b@text", Phase.LOADING, 0, False), "b", 1.0, waking=True)
    rows = ranked(LaneState((waking,), exclusive=True), [q("b", 0)], 40.0, GROUPED, {}, {}, SLEEPY)
    assert [r["eta_s"] for _, r in rows] == [0.5]  # what is left of b's wake
