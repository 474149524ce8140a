"""keep_alive in the eviction rule (docs/residency.md): a runtime a client asked to keep is
chosen only when no set without one frees enough; one past its idle deadline (recent use 0)
costs nothing and goes first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.memory.estimate import Estimate
from router.memory.eviction import plan_load
from router.memory.ledger import Ledger, Resident

GIB = 1 << 30


def idle(key: str, **kw: object) -> Resident:
    kw.setdefault("devices", {"host": GIB})
    return Resident(key=key, model=key, lane="text", **kw)  # type: ignore[arg-type]


def test_kept_goes_after_a_dearer_unkept_one() -> None:
    ledger = Ledger(
        {"host": 3 * GIB},
        (
            idle("kept", load_seconds=1.0, recent_uses=1, kept=True),
            idle("dear", load_seconds=30.0, recent_uses=9),
            idle("mid", load_seconds=5.0, recent_uses=2),
        ),
    )
    plan = plan_load(ledger, "new", "new", Estimate({"host": GIB}))
    assert [v.key for v in plan.evict] == ["mid"]
    plan = plan_load(ledger, "new", "new", Estimate({"host": 3 * GIB}))
    assert [v.key for v in plan.evict] == ["mid", "dear", "kept"]  # only then the kept one
    assert "keep_alive" in plan.evict[-1].reason


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 9)), min_size=1, max_size=6))
def test_a_kept_runtime_is_never_chosen_while_unkept_ones_suffice(spec) -> None:  # type: ignore[no-untyped-def]
    residents = tuple(
        idle(f"r{i}", kept=kept, recent_uses=uses) for i, (kept, uses) in enumerate(spec)
    )
    ledger = Ledger({"host": len(spec) * GIB}, residents)
    plan = plan_load(ledger, "new", "new", Estimate({"host": GIB}))
    unkept = [r for r in residents if not r.kept]
    if unkept:
        (victim,) = plan.evict
        assert not ledger.get(victim.key).kept  # type: ignore[union-attr]
