"""The master's share of a model spread over lending nodes (docs/cluster.md, "Pooled memory"):
pure, so admission, the dry run and the load's plan count the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.memory.estimate import GIB, Estimate, gang_share, local_share, vllm_estimate
from router.memory.eviction import MemoryRefusal, plan, refuse_if_too_large
from router.memory.ledger import Ledger, Resident
from router.runtime.holdings import held_here, loaded_here

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


@given(sizes, sizes, st.integers(min_value=1, max_value=17))
def test_a_gang_head_keeps_its_part_of_the_weights(weights: int, gpu: int, ranks: int) -> None:
    whole = vllm_estimate(None, {}, weights)
    share = gang_share(whole, ranks)
    part = share.detail["weights"]
    assert part * ranks >= weights > (part - 1) * ranks or weights == part == 0
    assert share.devices["host"] == whole.devices["host"] - weights + part
    claimed = vllm_estimate(0.9, {"gpu0": gpu}, weights)  # a GPU's claim is the GPU's
    assert gang_share(claimed, ranks) == claimed


def test_a_gang_larger_than_the_budget_is_admitted_by_the_heads_part() -> None:
    whole = vllm_estimate(None, {}, 180 * GIB)  # 180 GiB of weights, 4 GiB of KV, 2 of process
    budgets = {"host": 100 * GIB}
    with pytest.raises(MemoryRefusal):
        refuse_if_too_large(budgets, "gang", whole.devices)
    head = gang_share(whole, 2)
    assert head.devices["host"] == (90 + 4 + 2) * GIB
    refuse_if_too_large(budgets, "gang", head.devices)
    assert gang_share(whole, 1) is whole


def test_a_loaded_gang_head_holds_its_ranks_part_and_a_spread_model_the_rest() -> None:
    gang = vllm_estimate(None, {}, 180 * GIB)
    assert loaded_here(gang, 2, 0) == gang_share(gang, 2)
    assert loaded_here(gang, 2, 99 * GIB) == gang_share(gang, 2)  # followers' leases aside
    spread = Estimate({"host": 300 * MIB})
    assert loaded_here(spread, 1, 240 * MIB) == held_here(spread, 240 * MIB)
