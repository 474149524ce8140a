"""Queue positions and ETAs (router/runtime/eta.py): pure, replayed through the scheduler."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.runtime.eta import LaneState, Policy, Queued, estimate, lane_now
from router.runtime.scheduler import LaneView, Phase

MODELS = ("a", "b", "c")
GROUPED = Policy(max_batch_wait=30.0, order="grouped", max_bypass=8)
FIFO = Policy(max_batch_wait=30.0, order="fifo")
EMPTY = lane_now(LaneView(Phase.EMPTY, None, 0, False))


def q(model: str, at: float, *, request: bool = True) -> Queued:
    return Queued(f"{model}@text", model, at, 0, request)


def lanes() -> st.SearchStrategy[LaneState]:
    def build(phase: Phase, model: str, leases: int, elapsed: float) -> LaneState:
        if phase is Phase.EMPTY:
            return EMPTY
        leases = leases if phase is Phase.READY else 0
        return lane_now(LaneView(phase, f"{model}@text", leases, False), model, elapsed)

    return st.builds(
        build,
        st.sampled_from(list(Phase)),
        st.sampled_from(MODELS),
        st.integers(0, 3),
        st.floats(0, 20),
    )


queues = st.lists(st.sampled_from(MODELS), max_size=12).map(
    lambda ms: [q(m, float(i)) for i, m in enumerate(ms)]
)
policies = st.sampled_from([GROUPED, FIFO, Policy(5.0, "grouped", 1), Policy(30.0, "grouped")])
figures = st.dictionaries(st.sampled_from(MODELS), st.floats(0.1, 100), min_size=3)


def test_worked_example_grouped_and_fifo() -> None:
    queued = [q("a", 0), q("b", 1), q("a", 2)]
    loads, per_request = {"a": 10.0, "b": 20.0}, {"a": 2.0, "b": 3.0}
    rows = estimate(EMPTY, queued, 5.0, GROUPED, loads, per_request)
    # Both a requests are granted together once a has loaded and run at once (issue 32), so
    # b's load begins after the longer of them, 2 s.
    assert [(r["model"], r["position"], r["eta_s"]) for r in rows] == [
        ("a", 1, 10.0),
        ("a", 2, 10.0),
        ("b", 3, 32.0),
    ]
    assert [r["waiting_s"] for r in rows] == [5.0, 3.0, 4.0]
    rows = estimate(EMPTY, queued, 5.0, FIFO, loads, per_request)
    assert [(r["model"], r["eta_s"]) for r in rows] == [("a", 10.0), ("b", 32.0), ("a", 45.0)]


def test_running_load_counts_only_what_is_left_and_running_work_drains_first() -> None:
    loading = lane_now(LaneView(Phase.LOADING, "a@text", 0, False), "a", 4.0)
    rows = estimate(loading, [q("a", 0)], 1.0, GROUPED, {"a": 10.0}, {})
    assert rows[0]["eta_s"] == 6.0
    busy = lane_now(LaneView(Phase.READY, "a@text", 2, False), "a", 0.0)
    rows = estimate(busy, [q("b", 0)], 40.0, GROUPED, {"b": 5.0}, {"a": 3.0})
    # The two running requests of a run at once (issue 32: the drain is the remaining time of
    # the youngest, 3 s here, not one after the other), then b's load.
    assert rows[0]["eta_s"] == 8.0
    rows = estimate(busy, [q("b", 0)], 40.0, GROUPED, {"b": 5.0}, {})
    assert rows[0]["eta_s"] is None  # a's request time never measured: no number


def test_a_blocked_load_takes_no_position() -> None:
    queued = [q("b", 0, request=False), q("b", 1)]
    busy = lane_now(LaneView(Phase.READY, "a@text", 0, False), "a", 0.0)
    rows = estimate(busy, queued, 2.0, GROUPED, {"b": 5.0}, {})
    assert [(r["position"], r["eta_s"]) for r in rows] == [(1, 5.0)]


@settings(max_examples=300, deadline=None)
@given(lanes(), queues, policies, figures, figures)
def test_positions_are_one_to_n_and_keep_each_models_order(
    lane: LaneState, queued: list[Queued], policy: Policy, loads: dict, per: dict
) -> None:
    rows = estimate(lane, queued, 12.0, policy, loads, per)
    assert [r["position"] for r in rows] == list(range(1, len(queued) + 1))
    for model in MODELS:
        waits = [r["waiting_s"] for r in rows if r["model"] == model]
        assert waits == sorted(waits, reverse=True)  # the older request of a model goes first
    assert all(r["eta_s"] is not None for r in rows)  # every figure known: every ETA a number


@settings(max_examples=300, deadline=None)
@given(lanes(), queues, policies, figures, figures, st.sampled_from(MODELS))
def test_eta_is_null_from_the_first_request_needing_a_missing_figure(
    lane: LaneState, queued: list[Queued], policy: Policy, loads: dict, per: dict, missing: str
) -> None:
    del per[missing]  # `missing` has served no request yet
    rows = estimate(lane, queued, 12.0, policy, loads, per)
    if any(r.view.leases and r.model == missing for r in lane.residents):  # running work first
        assert [r["eta_s"] is None for r in rows] == sorted(r["eta_s"] is None for r in rows)
        return
    first = next((i for i, r in enumerate(rows) if r["model"] == missing), len(rows))
    assert all(r["eta_s"] is not None for r in rows[: first + 1])
    # After it, unknown, but for the requests granted in the same instant (issue 32: requests
    # granted together run at once, so their grant does not wait for its time).
    if first < len(rows):
        after = [r["eta_s"] for r in rows[first + 1 :]]
        assert all(eta is None or eta == rows[first]["eta_s"] for eta in after)
        assert [eta is None for eta in after] == sorted(eta is None for eta in after)
    loads.pop(missing)
    rows = estimate(lane, queued, 12.0, policy, loads, {})
    nulls = [r["eta_s"] is None for r in rows]
    assert nulls == sorted(nulls)  # once unknown, unknown for every later request
    if not lane.residents and rows:  # an empty lane
        assert rows[0]["eta_s"] is None or rows[0]["model"] != missing


@settings(max_examples=300, deadline=None)
@given(lanes(), queues, policies, figures, figures)
def test_eta_grows_with_position(
    lane: LaneState, queued: list[Queued], policy: Policy, loads: dict, per: dict
) -> None:
    rows = estimate(lane, queued, 12.0, policy, loads, per)
    etas = [r["eta_s"] for r in rows]
    assert etas == sorted(etas)  # in particular monotone for one model


@given(queues)
def test_fifo_serves_in_arrival_order(queued: list[Queued]) -> None:
    rows = estimate(EMPTY, queued, 12.0, FIFO, {}, {})
    assert [r["waiting_s"] for r in rows] == sorted((r["waiting_s"] for r in rows), reverse=True)


def test_at_the_in_flight_cap_the_loaded_models_request_goes_next() -> None:
    full = lane_now(LaneView(Phase.READY, "a@text", 1, False, free=0), "a", 0.0)
    policy = Policy(30.0, "grouped", 8, max_in_flight=1)
    rows = estimate(full, [q("b", 0), q("a", 1)], 2.0, policy, {"b": 7.0}, {"a": 2.0})
    assert [(r["model"], r["eta_s"]) for r in rows] == [("a", 2.0), ("b", 11.0)]
