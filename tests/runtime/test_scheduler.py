"""Pure swap/queue policy (router/runtime/scheduler.py): no processes, no clocks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.runtime.scheduler import Decision, LaneView, Phase, WaiterView, decide, next_deadline

W = WaiterView


def ready(active: str, leases: int = 0, draining: bool = False) -> LaneView:
    return LaneView(Phase.READY, active, leases, draining)


def test_empty_lane_loads_the_oldest_waiters_model() -> None:
    lane = LaneView(Phase.EMPTY, None, 0, False)
    assert decide(lane, [W("b", 1), W("a", 2)], 3, 30).load == "b"
    assert decide(lane, [], 3, 30) == Decision()


def test_loading_or_stopping_lane_only_waits() -> None:
    for phase in (Phase.LOADING, Phase.STOPPING):
        assert decide(LaneView(phase, "a", 0, False), [W("a", 0), W("b", 0)], 1, 30) == Decision()


def test_matching_waiters_are_granted_when_nobody_else_waits() -> None:
    assert decide(ready("a", 2), [W("a", 0), W("a", 1)], 2, 30).grant == (0, 1)


def test_loaded_model_goes_first_within_the_batch_window() -> None:
    d = decide(ready("a", 1), [W("b", 0), W("a", 1)], now=5, max_batch_wait=30)
    assert d.grant == (1,) and not d.drain


def test_batch_window_closes_and_the_lane_drains() -> None:
    d = decide(ready("a", 1), [W("b", 0), W("a", 1)], now=31, max_batch_wait=30)
    assert d.drain and not d.grant and not d.stop


def test_idle_runtime_with_only_other_waiters_swaps_at_once() -> None:
    d = decide(ready("a", 0), [W("b", 0)], now=0.1, max_batch_wait=30)
    assert d.drain and d.stop


def test_draining_runtime_stops_when_its_last_lease_is_released() -> None:
    assert decide(ready("a", 1, True), [W("b", 0)], 40, 30) == Decision()
    assert decide(ready("a", 0, True), [W("b", 0)], 40, 30).stop


def test_drain_is_cancelled_when_nobody_needs_the_swap_any_more() -> None:
    d = decide(ready("a", 1, True), [W("a", 0)], 40, 30)
    assert d.undrain and d.grant == (0,)


def test_next_deadline_is_the_oldest_other_waiter_plus_the_window() -> None:
    assert next_deadline([W("a", 0), W("b", 4), W("c", 2)], "a", 30) == 32
    assert next_deadline([W("a", 0)], "a", 30) is None


def simulate(arrivals: list[tuple[float, str]], service: float, window: float) -> tuple[int, float]:
    """Run a lane through decide(): returns (swaps, longest wait). Loads and stops are instant."""
    t, active, running, queue, swaps, longest = 0.0, None, [], [], 0, 0.0
    pending = sorted(arrivals)
    for _ in range(10_000):
        while pending and pending[0][0] <= t:
            at, key = pending.pop(0)
            queue.append(W(key, at))
        running = [end for end in running if end > t]
        lane = LaneView(Phase.READY if active else Phase.EMPTY, active, len(running), False)
        d = decide(lane, queue, t, window)
        if d.load:
            active = d.load
            swaps += 1
            continue
        if d.stop:
            active = None
            continue
        for i in sorted(d.grant, reverse=True):
            longest = max(longest, t - queue[i].enqueued_at)
            running.append(t + service)
            queue.pop(i)
        if not queue and not pending:
            return swaps - 1, longest  # the first load is not a swap
        t += 0.05
    raise AssertionError("simulation did not finish")


def test_r17_alternating_clients_do_not_swap_per_request() -> None:
    order = "ABAACAB"
    swaps, longest = simulate([(i * 0.01, k) for i, k in enumerate(order)], 1.0, 30)
    assert swaps <= 3
    assert longest < 30 + 3


@given(st.lists(st.tuples(st.floats(0, 20), st.sampled_from("ABC")), min_size=1, max_size=30))
def test_no_request_starves_beyond_the_window(arrivals: list[tuple[float, str]]) -> None:
    window, service = 5.0, 1.0
    _, longest = simulate(arrivals, service, window)
    # A waiter waits at most: the window, the drain of leases granted inside it, and one
    # batch of each other model queued before it.
    assert longest <= window + service + 3 * (window + service) + 1


def test_busy_runtime_is_not_drained_while_the_window_is_open() -> None:
    # B waits, A's running request has no queued successor yet: A keeps the lane until either
    # its last lease is released or B's batch window closes.
    assert decide(ready("a", 2), [W("b", 0)], now=5, max_batch_wait=30) == Decision()
    assert decide(ready("a", 2), [W("b", 0)], now=31, max_batch_wait=30).drain


def test_in_flight_cap_grants_only_the_free_leases_in_queue_order() -> None:
    """R19: a runtime at its cap takes no more; the oldest matching waiters go first."""
    waiters = [W("a", 0), W("b", 1), W("a", 2), W("a", 3)]
    capped = LaneView(Phase.READY, "a", 1, False, free=1)
    assert decide(capped, waiters, now=5, max_batch_wait=30).grant == (0,)
    full = LaneView(Phase.READY, "a", 2, False, free=0)
    assert decide(full, [W("a", 0), W("a", 1)], now=5, max_batch_wait=30) == Decision()
    uncapped = LaneView(Phase.READY, "a", 2, False, free=None)
    assert decide(uncapped, [W("a", 0), W("a", 1)], now=5, max_batch_wait=30).grant == (0, 1)


@given(
    free=st.integers(min_value=0, max_value=5),
    keys=st.lists(st.sampled_from("ab"), max_size=12),
    now=st.floats(min_value=0, max_value=100),
)
def test_no_decision_grants_more_than_the_free_leases(
    free: int, keys: list[str], now: float
) -> None:
    waiters = [W(k, float(i)) for i, k in enumerate(keys)]
    lane = LaneView(Phase.READY, "a", 3, False, free=free)
    decision = decide(lane, waiters, now, 30)
    assert len(decision.grant) <= free
    assert list(decision.grant) == sorted(decision.grant)
    assert all(waiters[i].key == "a" for i in decision.grant)
