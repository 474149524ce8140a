"""The master's share of a model spread over lending nodes (docs/cluster.md, "Pooled memory"):
pure, so admission, the dry run and the load's plan count the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.memory.estimate import Estimate, local_share
from router.memory.eviction import MemoryRefusal, plan, refuse_if_too_large
from router.memory.ledger import Ledger, Resident
from router.runtime.holdings import held_here

MIB = 1 << 20
sizes = st.integers(min_value=0, max_value=1 << 40)


@given(sizes, sizes, sizes)
def test_the_host_keeps_what_fits_its_free_room_and_no_more(host: int, gpu: int, room: int) -> None:
    need = Estimate({"host": host, "gpu0": gpu}, "measured")
    share = local_share(need, room)
    assert dict(share.devices) == {"host": min(host + gpu, room)}
    assert share.source == "measured" and share.detail["spread"] == host + gpu


def test_a_spread_model_larger_than_the_budget_fits_without_evicting() -> None:
    idle = Resident("idle", "idle", "text", {"host": 30 * MIB}, state="ready")
    ledger = Ledger({"host": 100 * MIB}, (idle,))
    whole = Estimate({"host": 300 * MIB})
    share = local_share(whole, ledger.free("host"))
    with pytest.raises(MemoryRefusal):
        refuse_if_too_large(ledger.budgets, "spread", whole.devices)
    refuse_if_too_large(ledger.budgets, "spread", share.devices)
    decided = plan(ledger, "spread", "spread:text", share, {}, act_on_memory=True)
    assert decided.fits and decided.evict == () and decided.wait == "none"
    assert decided.devices[0]["estimate"] == 70 * MIB


def test_a_loaded_spread_model_holds_the_whole_less_what_the_nodes_hold() -> None:
    whole = Estimate({"host": 300 * MIB})
    assert dict(held_here(whole, 240 * MIB).devices) == {"host": 60 * MIB}
    assert held_here(whole, 0) is whole  # no lease (yet): counted whole
