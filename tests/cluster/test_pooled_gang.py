"""vLLM multi-node's pure parts (docs/cluster.md, "vLLM multi-node"): the head's and the
followers' flags, the node's check of a master's lease request before anything reaches
argv, each follower's share, the follower's whole argv from the node's own file, and the
`vllm` lease kind on the one lease state machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends.vllm import VllmBackend
from router.cluster.pooled import LeaseKind, LeaseState, NodeRoom, NoRoom, RpcLease, Share
from router.cluster.pooled import lease as machine
from router.cluster.pooled.gang import GangFlags, GangPlan, follower_flags, shares
from router.config import ModelConfig, Settings, parse_kcpps
from router.config.schema import VllmSection
from router.domain import BackendMode, Lane
from router.errors import LeaseRefused

GIB = 1 << 30


def test_the_head_takes_rank_0_and_a_follower_adds_headless() -> None:
    plan = GangPlan((Share("s1", GIB), Share("s2", GIB)), "10.0.0.11", 50120)
    assert plan.nnodes == 3
    rendezvous = ["--master-addr", "10.0.0.11", "--master-port", "50120"]
    assert plan.launch_args([]) == ["--nnodes", "3", "--node-rank", "0", *rendezvous]
    assert plan.flags(2).argv() == ["--headless", "--nnodes", "3", "--node-rank", "2", *rendezvous]
    assert plan.lease_body(1) == {
        "kind": "vllm",
        "nnodes": 3,
        "node_rank": 1,
        "master_addr": "10.0.0.11",
        "master_port": 50120,
    }
    assert [n["node_rank"] for n in plan.answer()["nodes"]] == [1, 2]


def test_a_lease_request_round_trips_through_the_nodes_check() -> None:
    flags = GangFlags(2, 1, "192.168.1.5", 50100)
    body = flags.body()
    assert follower_flags(**_renamed(body)) == flags


def _renamed(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "nnodes": body["nnodes"],
        "rank": body["node_rank"],
        "master_addr": body["master_addr"],
        "master_port": body["master_port"],
    }


@pytest.mark.parametrize(
    ("change", "word"),
    [
        ({"master_addr": "0.0.0.0"}, "refused"),  # noqa: S104 - the wildcard, refused
        ({"master_addr": "head.lan"}, "refused"),  # a name: resolved nowhere, refused
        ({"master_addr": "--trust-remote-code"}, "refused"),
        ({"master_addr": "10.0.0.1 --x"}, "refused"),
        ({"master_addr": 7}, "IP address"),
        ({"rank": 0}, "node_rank is 1 to 1"),  # the head's rank is the master's own
        ({"rank": 2}, "node_rank is 1 to 1"),
        ({"nnodes": 1}, "nnodes must be 2"),
        ({"nnodes": 99}, "nnodes must be 2"),
        ({"master_port": 80}, "unprivileged"),
        ({"master_port": True}, "whole numbers"),
        ({"rank": "1"}, "whole numbers"),
    ],
)
def test_the_node_refuses_a_lease_request_that_would_misplace_its_follower(
    change: dict[str, Any], word: str
) -> None:
    asked = {"nnodes": 2, "rank": 1, "master_addr": "10.0.0.11", "master_port": 50100} | change
    with pytest.raises(LeaseRefused) as info:
        follower_flags(**asked)
    assert word in info.value.message


def test_each_follower_holds_one_ranks_part_or_the_load_is_refused() -> None:
    rooms = [NodeRoom("s1", 5 * GIB), NodeRoom("s2", 4 * GIB)]
    assert shares(3 * GIB, ("s1", "s2"), rooms) == (Share("s1", 3 * GIB), Share("s2", 3 * GIB))
    assert shares(5 * GIB, ("s1",), rooms) == (Share("s1", 5 * GIB),)
    with pytest.raises(NoRoom) as info:
        shares(5 * GIB, ("s1", "s2"), rooms)
    assert "s2" in info.value.message and "s1" not in info.value.message
    with pytest.raises(NoRoom, match="s3 \\(0 free\\)"):
        shares(GIB, ("s3",), rooms)  # a node that did not answer has no room


def _config(tmp_path: Path, **extra: Any) -> ModelConfig:
    raw = {"backend_mode": "vllm", "model_param": str(tmp_path / "big"), **extra}
    return parse_kcpps(tmp_path / "big.kcpps", json.dumps(raw).encode(), BackendMode.VLLM)


def test_a_followers_argv_is_the_nodes_own_file_and_serve_args_without_a_listener(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, contextsize=512, serve_args=["--pipeline-parallel-size", "2"])
    python = "/opt/vllm/bin/python"
    section = VllmSection(command=(python, "-m", "vllm.entrypoints.openai.api_server"))
    settings = Settings().model_copy(update={"vllm": section})
    flags = GangFlags(2, 1, "10.0.0.11", 50100).argv()
    argv = VllmBackend().follower_argv(config, settings, flags)
    # `--headless` is a mode of `vllm serve`: the API-server module becomes the CLI's serve.
    assert argv == [
        python,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "--model",
        str(tmp_path / "big"),
        *flags,
        "--max-model-len",
        "512",
        "--pipeline-parallel-size",
        "2",
    ]
    head = VllmBackend().argv(config, Lane.TEXT, 8123, settings)
    assert head[:3] == list(section.command) and "--headless" not in head


def test_a_vllm_lease_follows_the_one_state_machine_without_a_port() -> None:
    asked = RpcLease("l1", "m", "s1", "big", GIB, 30.0, kind=LeaseKind.VLLM)
    assert RpcLease("l0", "m", "s1", "big", GIB, 30.0).kind is LeaseKind.RPC
    granted = machine.grant(asked, now=100.0, port=None)
    assert granted.state is LeaseState.GRANTED and granted.port is None
    assert granted.kind is LeaseKind.VLLM and granted.live(129.0)
    renewed = machine.renew(granted, "m", now=120.0)
    assert renewed.expires == 150.0
    with pytest.raises(LeaseRefused):
        machine.renew(renewed, "m2", now=121.0)
    reclaiming = machine.reclaim(renewed, now=121.0, grace=5.0)
    assert reclaiming.expires == 126.0 and reclaiming.kind is LeaseKind.VLLM
    assert machine.expire(reclaiming, now=126.0).state is LeaseState.EXPIRED
    assert machine.release(renewed, "m").state is LeaseState.RELEASED
