"""The ledger's arithmetic and the eviction choice (router/memory/ledger.py, eviction.py)."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.memory.estimate import Estimate
from router.memory.eviction import (
    EXACT_LIMIT,
    MemoryRefusal,
    lent_to_reclaim,
    plan_load,
    reload_cost,
)
from router.memory.ledger import Ledger, Resident, Usage

GIB = 1 << 30
DEVICES = ("host", "gpu0", "gpu1")


def resident(key: str, **kw: object) -> Resident:
    kw.setdefault("devices", {"host": GIB})
    return Resident(key=key, model=key, lane="text", **kw)  # type: ignore[arg-type]


def test_budget_arithmetic_on_several_devices() -> None:
    ledger = Ledger({"host": 32 * GIB, "gpu0": 24 * GIB, "gpu1": 12 * GIB})
    ledger = ledger.hold(resident("a", devices={"host": GIB, "gpu0": 10 * GIB}))
    ledger = ledger.hold(resident("b", devices={"host": GIB, "gpu1": 13 * GIB}))
    assert [(r["device"], r["used"], r["free"]) for r in ledger.rows()] == [
        ("host", 2 * GIB, 30 * GIB),
        ("gpu0", 10 * GIB, 14 * GIB),
        ("gpu1", 13 * GIB, 0),  # over budget: free shows 0, the arithmetic keeps the debt
    ]
    assert ledger.free("gpu1") == -GIB
    # A measurement replaces the estimate under the same key.
    ledger = ledger.hold(resident("a", devices={"host": GIB, "gpu0": 6 * GIB}, source="measured"))
    assert ledger.used("gpu0") == 6 * GIB and len(ledger.residents) == 2
    usage = Usage.of(ledger.get("a"))  # type: ignore[arg-type]
    assert (usage.device, usage.bytes, usage.source) == ("gpu0", 7 * GIB, "measured")


def test_lent_memory_is_asked_back_largest_first_and_only_when_that_lets_the_load_fit() -> None:
    lent = [
        resident(f"rpc:{n}", devices={"host": n * GIB}, busy=True, pinned=True) for n in (1, 2, 3)
    ]
    ledger = Ledger({"host": 8 * GIB}, (resident("own", devices={"host": GIB}), *lent))

    def fits(need: int):  # type: ignore[no-untyped-def]
        return lambda rest: plan_load(rest, "b", "b", Estimate({"host": need * GIB})).fits

    assert lent_to_reclaim(ledger, lent, fits(4)) == {"rpc:3"}  # one lease, not 1 + 2
    assert lent_to_reclaim(ledger, lent, fits(6)) == {"rpc:3", "rpc:2"}
    # Evicting the idle `own` runtime is the plan's business once the leases are back.
    assert lent_to_reclaim(ledger, lent, fits(8)) == {"rpc:3", "rpc:2", "rpc:1"}
    # A pinned runtime of its own holds the rest: no lease is asked back for nothing.
    pinned = Ledger({"host": 8 * GIB}, (resident("pin", devices={"host": 4 * GIB}, pinned=True),))
    assert lent_to_reclaim(pinned.hold(lent[0]), lent[:1], fits(5)) == set()


def test_a_stopping_runtime_keeps_its_bytes_until_it_exited() -> None:
    ledger = Ledger({"host": 4 * GIB}, (resident("a", devices={"host": 3 * GIB}),))
    stopping = ledger.stopping("a")
    assert stopping.used("host") == 3 * GIB and stopping.get("a").state == "stopping"  # type: ignore[union-attr]
    plan = plan_load(stopping, "b", "b", Estimate({"host": 2 * GIB}))
    assert (plan.fits, plan.wait, plan.evict) == (True, "drain", ())
    assert stopping.exited("a").used("host") == 0
    assert plan_load(stopping.exited("a"), "b", "b", Estimate({"host": 2 * GIB})).wait == "none"


def test_dry_run_answer_shape_and_order() -> None:
    ledger = Ledger(
        {"host": 10 * GIB},
        (
            resident("hot", devices={"host": 4 * GIB}, load_seconds=20.0, recent_uses=5),
            resident("cold", devices={"host": 4 * GIB}, load_seconds=2.0, recent_uses=1),
            resident("pinned", devices={"host": 1 * GIB}, pinned=True),
        ),
    )
    answer = plan_load(ledger, "new", "new", Estimate({"host": 4 * GIB})).answer()
    assert answer == {
        "model": "new",
        "fits": True,
        "devices": [
            {
                "device": "host",
                "budget": 10 * GIB,
                "used": 9 * GIB,
                "estimate": 4 * GIB,
                "source": "estimate",
            }
        ],
        "evict": [
            {
                "model": "cold",
                "lane": "text",
                "reason": "idle; reload cost 2.0 (load 2.0 s measured x 1 recent uses)",
            }
        ],
        "wait": "none",
    }


def test_busy_only_means_drain_and_pinned_only_means_no_fit() -> None:
    busy = Ledger(
        {"host": 4 * GIB}, (resident("a", devices={"host": 3 * GIB}, busy=True, in_flight=2),)
    )
    plan = plan_load(busy, "b", "b", Estimate({"host": 2 * GIB}))
    assert (plan.fits, plan.wait, [v.key for v in plan.evict]) == (True, "drain", ["a"])
    assert plan.evict[0].reason.startswith("busy: stops after its 2 request(s)")
    pinned = Ledger({"host": 4 * GIB}, (resident("a", devices={"host": 3 * GIB}, pinned=True),))
    plan = plan_load(pinned, "b", "b", Estimate({"host": 2 * GIB}))
    assert (plan.fits, plan.wait, plan.evict) == (False, "none", ())


def test_already_resident_fits_as_is() -> None:
    ledger = Ledger({"host": 4 * GIB}, (resident("a", devices={"host": 4 * GIB}),))
    assert plan_load(ledger, "a", "a", Estimate({"host": 4 * GIB})).evict == ()


def test_too_large_for_an_empty_device_is_a_400_naming_model_estimate_budget() -> None:
    ledger = Ledger({"host": 600 << 20})
    with pytest.raises(MemoryRefusal) as caught:
        plan_load(ledger, "huge", "huge", Estimate({"host": GIB}))
    assert caught.value.status == 400
    message = caught.value.message
    assert "'huge'" in message and "1 GiB" in message and "600 MiB" in message
    with pytest.raises(MemoryRefusal, match="gpu3"):
        plan_load(ledger, "g", "g", Estimate({"host": 1, "gpu3": 1}))  # no such device


# ---- properties --------------------------------------------------------------------------

_bytes = st.integers(0, 8).map(lambda n: n * GIB // 2)
_resident = st.builds(
    lambda i, devs, busy, pinned, state, secs, uses, last: Resident(
        key=f"r{i}",
        model=f"m{i}",
        lane="text",
        devices=devs,
        busy=busy,
        pinned=pinned,
        state=state,
        load_seconds=secs,
        recent_uses=uses,
        last_used=last,
    ),
    st.integers(0, 10_000),
    st.fixed_dictionaries({}, optional={d: _bytes for d in DEVICES}),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["ready", "ready", "ready", "loading", "stopping"]),
    st.one_of(st.none(), st.floats(0.1, 100)),
    st.integers(0, 20),
    st.floats(0, 1000),
)
_ledgers = st.builds(
    Ledger,
    st.fixed_dictionaries({d: st.integers(0, 24).map(lambda n: n * GIB) for d in DEVICES}),
    st.lists(_resident, max_size=7, unique_by=lambda r: r.key).map(tuple),
)
_estimates = st.fixed_dictionaries({}, optional={d: _bytes for d in DEVICES}).map(Estimate)


def _fits_after(ledger: Ledger, est: Estimate, gone: set[str]) -> bool:
    return all(
        ledger.free(d) + sum(r.devices.get(d, 0) for r in ledger.residents if r.key in gone) >= b
        for d, b in est.devices.items()
        if b > 0
    )


@settings(max_examples=300)
@given(_ledgers, _estimates)
def test_choice_properties(ledger: Ledger, est: Estimate) -> None:
    try:
        plan = plan_load(ledger, "new", "new", est)
    except MemoryRefusal:
        assert any(b > ledger.budgets.get(d, 0) for d, b in est.devices.items() if b > 0)
        return
    by_key = {r.key: r for r in ledger.residents}
    victims = [by_key[v.key] for v in plan.evict]
    # Never pinned, never loading or already stopping; busy only when waiting to drain.
    assert all(not r.pinned and r.state == "ready" for r in victims)
    if plan.wait == "none":
        assert not any(r.busy for r in victims)
        if plan.fits:
            assert _fits_after(ledger, est, {r.key for r in victims})
    if plan.wait == "drain":
        stopping = {r.key for r in ledger.residents if r.state == "stopping"}
        assert _fits_after(ledger, est, {r.key for r in victims} | stopping)
    # Stopped in order: idle before busy, cheapest first.
    order = [(r.busy, reload_cost(r)) for r in victims]
    assert order == sorted(order)
    # Deterministic: the same inputs in another order give the same answer.
    shuffled = Ledger(ledger.budgets, tuple(reversed(ledger.residents)))
    assert plan_load(shuffled, "new", "new", est) == plan
    if plan.wait == "none" and plan.evict:
        _assert_cheapest(ledger, est, victims)


def _assert_cheapest(ledger: Ledger, est: Estimate, victims: list[Resident]) -> None:
    """No other fitting set of idle, unpinned, ready runtimes costs less to reload."""
    cost = sum(reload_cost(r) for r in victims)
    idle = [r for r in ledger.residents if r.state == "ready" and not r.pinned and not r.busy]
    for n in range(1, len(idle) + 1):
        for combo in combinations(idle, n):
            if _fits_after(ledger, est, {r.key for r in combo}):
                assert sum(reload_cost(r) for r in combo) >= cost - 1e-9


def test_greedy_beyond_the_exact_limit_still_fits_and_skips_busy() -> None:
    many = tuple(
        resident(f"r{i:02}", devices={"host": GIB}, recent_uses=i, busy=i % 5 == 0)
        for i in range(30)
    )
    ledger = Ledger({"host": 31 * GIB}, many)
    plan = plan_load(ledger, "new", "new", Estimate({"host": 4 * GIB}))
    keys = [v.key for v in plan.evict]
    assert plan.wait == "none" and len(keys) == 3
    assert keys == ["r01", "r02", "r03"]  # the cheapest idle ones, cheapest first


# test-audit section 7, memory rows: exact answers that fail when the rule breaks.


def test_the_reload_cost_weighs_recent_use() -> None:
    """Load seconds x recent uses: a runtime nobody used lately is free to evict, however slow
    it is to load; one never measured costs 1 s plus its bytes at 1 GiB/s per use."""
    hot = resident("hot", devices={"host": 4 * GIB}, load_seconds=10.0, recent_uses=10)
    stale = resident("stale", devices={"host": 4 * GIB}, load_seconds=20.0, recent_uses=0)
    fresh = resident("fresh", devices={"host": 2 * GIB}, recent_uses=3)
    assert (reload_cost(hot), reload_cost(stale), reload_cost(fresh)) == (100.0, 0.0, 9.0)
    ledger = Ledger({"host": 9 * GIB}, (hot, stale))  # room for one of them beside the load
    plan = plan_load(ledger, "new", "new", Estimate({"host": 4 * GIB}))
    assert (plan.fits, plan.wait) == (True, "none")
    assert [v.answer() for v in plan.evict] == [
        {
            "model": "stale",
            "lane": "text",
            "reason": "idle; reload cost 0.0 (load 20.0 s measured x 0 recent uses)",
        }
    ]


@pytest.mark.parametrize("busy", [11, 13], ids=["exact-pass", "greedy-pass"])
def test_both_passes_prefer_the_idle_victim(busy: int) -> None:
    """1 idle runtime (50 s to load) and busy ones that cost 1 each: only the idle one and a
    busy one together free enough, so the load drains. Up to 12 candidates every set is
    tried; beyond, the greedy pass must rank idle before busy as the exact pass does, though
    the busy ones are cheaper per byte."""
    idle = resident("idle", load_seconds=50.0, recent_uses=1, last_used=1.0)
    others = tuple(
        resident(f"b{i:02}", load_seconds=1.0, recent_uses=1, busy=True, last_used=float(i))
        for i in range(busy)
    )
    assert len(others) + 1 > EXACT_LIMIT if busy == 13 else len(others) + 1 <= EXACT_LIMIT
    ledger = Ledger({"host": (busy + 3) * GIB}, (idle, *others))  # 2 GiB free, 4 GiB needed
    plan = plan_load(ledger, "new", "new", Estimate({"host": 4 * GIB}))
    assert (plan.fits, plan.wait) == (True, "drain")
    assert [(v.key, v.busy) for v in plan.evict] == [("idle", False), ("b00", True)]
