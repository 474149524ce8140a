"""Pooled memory's pure parts: node choice and layer split from the ledgers, and the RPC
lease's state machine (docs/cluster.md, "Pooled memory")."""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from router.cluster.pooled import (
    AUTO,
    LeaseState,
    NodeRoom,
    NoRoom,
    RpcLease,
    Share,
    choose_nodes,
    split_layers,
)
from router.cluster.pooled import lease as machine
from router.cluster.pooled.borrower import checked_endpoint
from router.cluster.pooled.cache import prune
from router.cluster.pooled.ports import free_port, listening, open_ports
from router.config.pooled import PooledSection
from router.errors import LeaseRefused, RouterError

GIB = 1 << 30
rooms_st = st.lists(st.integers(min_value=0, max_value=64 * GIB), min_size=0, max_size=6).map(
    lambda frees: [NodeRoom(f"n{i}", free) for i, free in enumerate(frees)]
)


@given(rooms_st, st.integers(min_value=1, max_value=200 * GIB), st.integers(1, 2 * GIB))
def test_auto_choice_never_exceeds_a_node_and_takes_the_fewest_nodes(
    rooms: list[NodeRoom], need: int, unit: int
) -> None:
    free = {r.node_id: r.free // unit * unit for r in rooms}
    try:
        shares = choose_nodes(need, rooms, AUTO, unit)
    except NoRoom:
        assert sum(free.values()) < need  # refused only when the whole pool cannot cover it
        return
    assert all(0 < s.bytes <= free[s.node_id] and s.bytes % unit == 0 for s in shares)
    assert sum(s.bytes for s in shares) >= need
    assert len({s.node_id for s in shares}) == len(shares)
    # No smaller set of nodes covers the need.
    fewer = len(shares) - 1
    for combo in itertools.combinations(free.values(), fewer) if fewer > 0 else ():
        assert sum(combo) < need


def test_an_explicit_list_uses_only_those_nodes_and_names_an_unknown_one() -> None:
    rooms = [NodeRoom("big", 40 * GIB), NodeRoom("laptop", 16 * GIB), NodeRoom("desk", 24 * GIB)]
    assert choose_nodes(30 * GIB, rooms, ("laptop", "desk")) == (
        Share("desk", 24 * GIB),
        Share("laptop", 6 * GIB),
    )
    with pytest.raises(NoRoom, match="ghost"):
        choose_nodes(GIB, rooms, ("desk", "ghost"))
    with pytest.raises(NoRoom, match="needed"):
        choose_nodes(41 * GIB, rooms, ("laptop", "desk"))
    assert choose_nodes(0, rooms, AUTO) == ()


@given(
    st.integers(1, 120),
    st.integers(1, GIB),
    st.integers(0, 200 * GIB),
    st.lists(st.integers(0, 64 * GIB), max_size=4),
)
def test_a_layer_split_keeps_every_node_inside_its_share(
    layers: int, layer_bytes: int, host_room: int, share_bytes: list[int]
) -> None:
    shares = [Share(f"n{i}", b) for i, b in enumerate(share_bytes)]
    try:
        split = split_layers(layers, layer_bytes, host_room, shares)
    except NoRoom:
        assert host_room < layers * layer_bytes  # only the host's own room can refuse
        return
    assert split.host_layers + sum(split.node_layers) == layers
    assert split.host_layers * layer_bytes <= host_room
    for share, count in zip(shares, split.node_layers, strict=True):
        assert count * layer_bytes <= share.bytes
    argv = split.argv()
    assert argv[:2] == ["-ngl", str(sum(split.node_layers))]


def _lease(ttl: float = 10.0) -> RpcLease:
    return RpcLease("l1", "master-a", "box-b", "big", 4 * GIB, ttl)


def test_the_lease_machine_grants_renews_expires_and_releases() -> None:
    lease = machine.grant(_lease(), now=100.0, port=50100)
    assert lease.state is LeaseState.GRANTED and lease.live(105.0) and not lease.live(110.0)
    lease = machine.renew(lease, "master-a", now=108.0)
    assert lease.expires == 118.0 and lease.live(115.0)
    with pytest.raises(LeaseRefused, match="another master"):
        machine.renew(lease, "master-z", now=109.0)
    with pytest.raises(LeaseRefused, match="not expired"):
        machine.expire(lease, now=117.0)
    gone = machine.expire(lease, now=118.0)
    assert gone.state is LeaseState.EXPIRED and not gone.live(118.0)
    with pytest.raises(LeaseRefused):
        machine.renew(gone, "master-a", now=118.5)
    with pytest.raises(LeaseRefused, match="expired"):
        machine.renew(lease, "master-a", now=118.0)  # past its expiry: no renewal
    done = machine.release(lease, "master-a")
    assert done.state is LeaseState.RELEASED
    with pytest.raises(LeaseRefused, match="another master"):
        machine.release(lease, "master-z")


def test_a_reclaimed_lease_ends_by_its_deadline_whatever_the_master_renews() -> None:
    lease = machine.grant(_lease(ttl=30.0), now=100.0, port=50100)
    asked = machine.reclaim(lease, now=101.0, grace=5.0)
    assert asked.state is LeaseState.RECLAIMING and asked.expires == 106.0 and asked.live(105.9)
    kept = machine.renew(asked, "master-a", now=104.0)  # answered, but no later end
    assert kept.state is LeaseState.RECLAIMING and kept.expires == 106.0
    with pytest.raises(LeaseRefused, match="expired"):
        machine.renew(kept, "master-a", now=106.0)
    assert machine.expire(kept, now=106.0).state is LeaseState.EXPIRED
    assert machine.release(kept, "master-a").state is LeaseState.RELEASED
    soon = machine.reclaim(lease, now=129.0, grace=5.0)  # it was to expire sooner anyway
    assert soon.expires == 130.0
    with pytest.raises(LeaseRefused):
        machine.reclaim(kept, now=104.0, grace=5.0)  # one reclaim per lease
    with pytest.raises(LeaseRefused, match="expired"):
        machine.reclaim(lease, now=130.0, grace=5.0)
    with pytest.raises(LeaseRefused):
        machine.reclaim(_lease(), now=100.0, grace=5.0)  # never granted


_STEPS = st.lists(
    st.sampled_from(["grant", "renew", "reclaim", "expire", "release", "other"]), max_size=8
)


@given(_STEPS, st.floats(0.1, 50.0))
def test_no_sequence_of_steps_leaves_the_machine(steps: list[str], gap: float) -> None:
    """Terminal states stay terminal; a refused step changes nothing."""
    lease, now = _lease(), 0.0
    for step in steps:
        now += gap
        before = lease
        try:
            if step == "grant":
                lease = machine.grant(lease, now, 50100)
            elif step == "renew":
                lease = machine.renew(lease, "master-a", now)
            elif step == "reclaim":
                lease = machine.reclaim(lease, now, gap / 2)
            elif step == "expire":
                lease = machine.expire(lease, now)
            elif step == "release":
                lease = machine.release(lease, "master-a")
            else:
                lease = machine.release(lease, "master-z")
        except LeaseRefused:
            assert lease is before
            continue
        assert before.state not in (LeaseState.EXPIRED, LeaseState.RELEASED)
        assert lease.state in machine._NEXT[before.state]


def test_the_rpc_server_never_binds_every_address() -> None:
    for wildcard in ("0.0.0.0", "::", "box-b.lan", "::1"):
        with pytest.raises(ValidationError, match="bind"):
            PooledSection.model_validate({"bind": wildcard})
    with pytest.raises(ValidationError, match="port_max"):
        PooledSection.model_validate({"port_min": 50200, "port_max": 50100})
    assert PooledSection().lend is False  # off by default


@pytest.mark.parametrize(
    "endpoint",
    ["0.0.0.0:50100", "box-b.lan:50100", "10.0.0.5:99999", "10.0.0.5", None, "::1:50100"],
)
def test_an_endpoint_a_node_answers_is_checked_before_it_reaches_argv(endpoint: object) -> None:
    with pytest.raises(RouterError, match="endpoint"):
        checked_endpoint(endpoint)


def test_a_well_formed_endpoint_passes_in_normal_form() -> None:
    assert checked_endpoint("10.0.0.13:50100") == "10.0.0.13:50100"


def test_the_tensor_cache_is_pruned_oldest_first_to_its_budget(tmp_path: Path) -> None:
    folder = tmp_path / "rpc"
    folder.mkdir()
    for age, name in enumerate(["old", "mid", "new"]):
        path = folder / name
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + age, 1000 + age))
    assert prune(tmp_path, 250) == 100
    assert sorted(p.name for p in folder.iterdir()) == ["mid", "new"]
    assert prune(tmp_path, 1000) == 0 and prune(tmp_path / "absent", 0) == 0


def test_listening_sockets_are_read_from_the_kernel_tables() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert ("127.0.0.1", port) not in listening()  # bound, not listening
        sock.listen()
        assert ("127.0.0.1", port) in listening()
        assert open_ports(port, port) == [("127.0.0.1", port)]
        assert free_port(port, port, set()) is None
    assert free_port(port, port, {port}) is None
