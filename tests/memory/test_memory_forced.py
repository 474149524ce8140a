"""The load decision (router/memory/eviction.py `plan`), hypothesis:
forced victims (the lane's own runtime, `router_unload_policy`) come first; memory victims are
never pinned, never loading, never busy unless the plan waits for a drain; after the listed
runtimes have gone the load fits; and the answer does not depend on the residents' order, so
a dry run and the real load right after it (the same call on the same ledger) agree."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from router.memory import eviction
from router.memory.estimate import Estimate
from router.memory.eviction import MemoryRefusal
from router.memory.ledger import Ledger, Resident, State

MIB = 1 << 20


@st.composite
def cases(draw: st.DrawFn) -> tuple[Ledger, dict[str, str], Estimate]:
    n = draw(st.integers(0, 6))
    residents = tuple(
        Resident(
            key=f"r{i}",
            model=f"m{i}",
            lane=draw(st.sampled_from(["text", "embeddings"])),
            devices={"host": draw(st.integers(1, 64)) * MIB},
            state=draw(st.sampled_from(["ready", "ready", "loading", "stopping"])),
            busy=draw(st.booleans()),
            pinned=draw(st.booleans()),
            recent_uses=draw(st.integers(0, 5)),
            last_used=float(i),
        )
        for i in range(n)
    )
    forced = {r.key: "forced" for r in residents if draw(st.booleans()) and r.key != "new"}
    ledger = Ledger({"host": draw(st.integers(16, 256)) * MIB}, residents)
    return ledger, forced, Estimate({"host": draw(st.integers(1, 300)) * MIB})


@given(cases(), st.randoms())
def test_forced_first_memory_victims_safe_and_order_free(case, rnd) -> None:  # type: ignore[no-untyped-def]
    ledger, forced, need = case
    try:
        plan = eviction.plan(ledger, "new", "new", need, forced, act_on_memory=True)
    except MemoryRefusal:
        assert need.devices["host"] > ledger.budgets["host"]
        return
    keys = [v.key for v in plan.evict]
    listed_forced = [k for k in keys if k in forced]
    assert keys[: len(listed_forced)] == listed_forced  # forced victims first
    by_key = {r.key: r for r in ledger.residents}
    for key in keys:
        r = by_key[key]
        assert r.state != "stopping"
        if key not in forced:
            assert not r.pinned and r.state == "ready"
            assert plan.wait == "drain" or not r.busy
    if plan.fits:
        gone = set(keys) | set(forced)
        if plan.wait == "drain":  # stopping runtimes count as gone once they have exited
            gone |= {r.key for r in ledger.residents if r.state == "stopping"}
        left = sum(r.devices["host"] for r in ledger.residents if r.key not in gone)
        assert left + need.devices["host"] <= ledger.budgets["host"]
    shuffled = list(ledger.residents)
    rnd.shuffle(shuffled)
    again = eviction.plan(
        Ledger(ledger.budgets, tuple(shuffled)), "new", "new", need, forced, act_on_memory=True
    )
    assert again == plan


@given(cases())
def test_lane_residency_never_acts_on_memory(case) -> None:  # type: ignore[no-untyped-def]
    ledger, forced, need = case
    plan = eviction.plan(ledger, "new", "new", need, forced, act_on_memory=False)
    assert {v.key for v in plan.evict} <= set(forced)  # never refused, never a memory victim


def test_a_forced_victim_still_loading_or_stopping_makes_the_load_wait() -> None:
    """test-audit section 7: the lane's runtime must be gone before the load starts. One
    still loading is listed and waited for; one already stopping is not listed (it is
    leaving) but still waited for; a ready idle one is stopped with no wait."""
    budgets = {"host": 100 * MIB}

    def forced_plan(state: State) -> eviction.Plan:
        lane = Resident(key="old", model="old", lane="text", devices={"host": 60 * MIB})
        ledger = Ledger(budgets, (dataclasses.replace(lane, state=state),))
        forced = {"old": "the text lane holds one runtime at a time"}
        return eviction.plan(
            ledger, "new", "new", Estimate({"host": 70 * MIB}), forced, act_on_memory=True
        )

    stopping, loading, ready = forced_plan("stopping"), forced_plan("loading"), forced_plan("ready")
    old = eviction.Victim("old", "old", "text", "the text lane holds one runtime at a time", False)
    assert (stopping.fits, stopping.evict, stopping.wait) == (True, (), "drain")
    assert (loading.fits, loading.evict, loading.wait) == (True, (old,), "drain")
    assert (ready.fits, ready.evict, ready.wait) == (True, (old,), "none")
    # The rows count the leaving runtime's bytes as used: 60 of 100 MiB, 70 wanted.
    assert [(d["used"], d["estimate"]) for d in ready.devices] == [(60 * MIB, 70 * MIB)]
