"""The replica choice by memory (issue 25), pure: `fit_of` from what a snapshot says, and
`choose_replica` preferring a node where the model is resident or fits without eviction."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.cluster import DeviceMemory, Fit, NodeModel, RuntimeMemory, choose_replica, fit_of

MIB = 1 << 20
ranks = st.sampled_from(list(Fit))


def host(free: int, budget: int = 64 * MIB) -> DeviceMemory:
    return DeviceMemory(device="host", budget=budget, used=budget - free, free=free)


def test_fit_of_reads_residency_then_the_estimate_against_free_memory() -> None:
    base = NodeModel(local_id="m", estimate={"host": 30 * MIB})
    assert fit_of(base, [host(40 * MIB)]) is Fit.FITS
    assert fit_of(base, [host(30 * MIB)]) is Fit.FITS  # exactly enough
    assert fit_of(base, [host(29 * MIB)]) is Fit.EVICTS
    resident = RuntimeMemory(device="host", bytes=30 * MIB)
    assert fit_of(base.model_copy(update={"memory": resident}), [host(0)]) is Fit.RESIDENT
    assert fit_of(base.model_copy(update={"loaded": True}), [host(0)]) is Fit.RESIDENT
    # A node that said nothing (an older peer, no estimate): as before memory was reported.
    assert fit_of(NodeModel(local_id="m"), [host(0)]) is Fit.FITS
    assert fit_of(base, []) is Fit.FITS
    # A device the node does not have cannot hold the model's share.
    on_gpu = NodeModel(local_id="m", estimate={"gpu0": MIB, "host": 0})
    assert fit_of(on_gpu, [host(64 * MIB)]) is Fit.EVICTS


@given(
    need=st.dictionaries(st.sampled_from(["host", "gpu0", "gpu1"]), st.integers(0, 10**10)),
    free=st.dictionaries(st.sampled_from(["host", "gpu0", "gpu1"]), st.integers(0, 10**10)),
)
def test_fits_exactly_when_every_needed_device_has_that_much_free(
    need: dict[str, int], free: dict[str, int]
) -> None:
    devices = [DeviceMemory(device=d, budget=f, free=f) for d, f in free.items()]
    model = NodeModel(local_id="m", estimate=need)
    fits = all(b == 0 or (d in free and b <= free[d]) for d, b in need.items())
    assert (fit_of(model, devices) is Fit.FITS) == (fits or not devices)


@given(
    local=st.one_of(st.none(), ranks),
    busy=st.booleans(),
    remote=st.lists(ranks, max_size=6),
    turn=st.integers(0, 50),
)
def test_the_choice_prefers_resident_or_fitting_replicas(
    local: Fit | None, busy: bool, remote: list[Fit], turn: int
) -> None:
    names = [f"r{i}" for i in range(len(remote))]
    rank: dict[str, Fit] = dict(zip(names, remote, strict=True))
    if local is not None:
        rank["here"] = local
    chosen = choose_replica(None if local is None else "here", busy, names, turn, rank.__getitem__)
    idle = [] if local is None or busy else ["here"]
    candidates = idle + names
    if not candidates:
        assert chosen == (None if local is None else "here")  # busy local queues, or a 502
        return
    assert chosen is not None
    best = min(rank[c] for c in candidates)
    if best < Fit.EVICTS:
        # Never a load that evicts while a replica that fits (or holds the model) is free.
        assert rank[chosen] < Fit.EVICTS
        if "here" in idle and rank["here"] < Fit.EVICTS:
            assert chosen == "here"  # an idle local replica that fits: no hop
        else:  # the remote ones that need no eviction, in rotation
            spare = [n for n in names if rank[n] < Fit.EVICTS]
            assert chosen == spare[turn % len(spare)]
    elif idle:
        assert chosen == "here"  # every replica evicts: stay local, as before


@given(local=st.booleans(), busy=st.booleans(), n=st.integers(0, 5), turn=st.integers(0, 50))
def test_without_memory_facts_the_choice_is_the_old_rotation(
    local: bool, busy: bool, n: int, turn: int
) -> None:
    names = [f"r{i}" for i in range(n)]
    here = "here" if local else None
    old = here if here is not None and not busy else (names[turn % n] if names else here)
    assert choose_replica(here, busy, names, turn) == old
    assert choose_replica(here, busy, names, turn, lambda _: Fit.FITS) == old
