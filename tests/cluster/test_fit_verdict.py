"""The node's own verdict in the snapshot (issue 25): `evicts` from its dry run, and `fit_of`
taking it over the master's arithmetic when sent (a lane that holds another model under
`residency: lane` evicts although memory would fit)."""

from __future__ import annotations

from typing import Any, Literal

from hypothesis import given
from hypothesis import strategies as st

from router.cluster import DeviceMemory, Fit, NodeModel, RuntimeMemory, fit_of
from router.cluster.memory import plan_evicts, read_node_memory
from router.cluster.protocol import Snapshot
from router.config import ModelConfig
from router.errors import RouterError
from router.memory.eviction import Plan, Victim

MIB = 1 << 20
devices_st = st.lists(
    st.builds(
        lambda d, f: DeviceMemory(device=d, budget=f, free=f),
        st.sampled_from(["host", "gpu0"]),
        st.integers(0, 10**10),
    ),
    max_size=2,
)
estimates = st.one_of(
    st.none(), st.dictionaries(st.sampled_from(["host", "gpu0"]), st.integers(0, 10**10))
)


def host(free: int) -> DeviceMemory:
    return DeviceMemory(device="host", budget=64 * MIB, used=64 * MIB - free, free=free)


def test_the_verdict_wins_over_the_arithmetic() -> None:
    model = NodeModel(local_id="m", estimate={"host": 30 * MIB})
    roomy, tight = [host(60 * MIB)], [host(10 * MIB)]
    assert fit_of(model, roomy) is Fit.FITS and fit_of(model, tight) is Fit.EVICTS
    # Memory fits, but the node's lane holds another model: its dry run evicts it.
    assert fit_of(model.model_copy(update={"evicts": True}), roomy) is Fit.EVICTS
    # The node knows better than the master's copy of its free bytes, either way.
    assert fit_of(model.model_copy(update={"evicts": False}), tight) is Fit.FITS
    # Resident comes first whatever the verdict.
    held = RuntimeMemory(device="host", bytes=30 * MIB)
    assert fit_of(model.model_copy(update={"evicts": True, "memory": held}), []) is Fit.RESIDENT


@given(estimate=estimates, devices=devices_st, evicts=st.booleans(), loaded=st.booleans())
def test_a_sent_verdict_decides_unless_resident(
    estimate: dict[str, int] | None, devices: list[DeviceMemory], evicts: bool, loaded: bool
) -> None:
    model = NodeModel(local_id="m", estimate=estimate, evicts=evicts, loaded=loaded)
    expected = Fit.RESIDENT if loaded else (Fit.EVICTS if evicts else Fit.FITS)
    assert fit_of(model, devices) is expected


@given(estimate=estimates, devices=devices_st)
def test_without_a_verdict_the_arithmetic_is_unchanged(
    estimate: dict[str, int] | None, devices: list[DeviceMemory]
) -> None:
    model = NodeModel(local_id="m", estimate=estimate)
    free = {d.device: d.free for d in devices}
    fits = estimate is None or not devices
    fits = fits or all(b <= free.get(d, -1) for d, b in (estimate or {}).items() if b > 0)
    assert fit_of(model, devices) is (Fit.FITS if fits else Fit.EVICTS)


def test_an_older_peers_snapshot_has_no_verdict_and_a_newer_one_round_trips() -> None:
    old = Snapshot.model_validate(
        {"protocol": 1, "node_id": "s1", "node_url": "http://x", "models": [{"local_id": "m"}]}
    )
    assert old.models[0].evicts is None
    new = Snapshot(
        protocol=1,
        node_id="s1",
        node_url="http://x",
        models=(NodeModel(local_id="m", evicts=True),),
    )
    assert Snapshot.model_validate_json(new.model_dump_json()).models[0].evicts is True


def plan(evict: int, wait: Literal["none", "drain"] = "none") -> Plan:
    victims = tuple(Victim(f"k{i}", f"v{i}", "text", "lane", False) for i in range(evict))
    return Plan("m", True, ({"device": "host", "estimate": 5},), victims, wait)


@given(evict=st.integers(0, 3), wait=st.sampled_from(["none", "drain"]))
def test_plan_evicts_when_it_stops_or_waits_for_anything(
    evict: int, wait: Literal["none", "drain"]
) -> None:
    assert plan_evicts(plan(evict, wait)) == (evict > 0 or wait == "drain")


class Reader:
    """The manager's two answers, as a node reads them for its snapshot."""

    def __init__(self, plans: dict[str, Plan | None]) -> None:
        self.plans = plans

    def memory_now(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        return {}, [{"device": "host", "budget": 64, "used": 0, "free": 64}]

    async def plan(self, config: ModelConfig, lane: Any = None) -> Plan:
        found = self.plans[config.id]
        if found is None:
            raise RouterError("refused")
        return found


class Config:
    def __init__(self, id: str) -> None:
        self.id = id


async def test_the_snapshot_reading_carries_each_dry_runs_verdict() -> None:
    reader = Reader({"a": plan(0), "b": plan(1), "c": plan(0, "drain"), "d": None})
    configs: Any = [Config(i) for i in "abcd"]
    memory = await read_node_memory(reader, configs)
    assert memory.evicts == {"a": False, "b": True, "c": True}
    assert set(memory.estimates) == {"a", "b", "c"}  # a refused dry run says neither
