"""vLLM Elastic Expert Parallelism: `--enable-elastic-ep` (and what it needs) pass the
serve_args allowlist, so the contract's operational routes reach the runtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.base import UnsafeArguments
from backends.vllm import check_serve_args
from router.config import Settings, parse_kcpps
from router.domain import BackendMode
from tests.support.harness import RouterHarness, chat

pytestmark = pytest.mark.timeout(60)
EEP = [
    "--enable-elastic-ep",
    "--enable-expert-parallel",
    "--data-parallel-size",
    "2",
    "--data-parallel-backend",
    "ray",
    "--enable-eplb",
]


def check(tmp_path: Path, serve_args: list[str]) -> None:
    raw = {"backend_mode": "vllm", "model_param": "m.safetensors", "serve_args": serve_args}
    config = parse_kcpps(tmp_path / "m.kcpps", json.dumps(raw).encode(), BackendMode.VLLM)
    check_serve_args(config.serve_args, config, Settings())


def test_elastic_ep_flags_pass_the_allowlist(tmp_path: Path) -> None:
    check(tmp_path, EEP)
    check(tmp_path, ["--enable-elastic-ep", "--enable-expert-parallel", "-dp", "4"])


@pytest.mark.parametrize(
    ("serve_args", "flag"),
    [
        (["--enable-elastic-ep"], "--enable-elastic-ep"),  # needs expert parallelism
        (["--data-parallel-backend", "tcp"], "--data-parallel-backend"),
        (["--data-parallel-rpc-port", "5"], "--data-parallel-rpc-port"),
        (["--data-parallel-address", "10.0.0.1"], "--data-parallel-address"),
    ],
)
def test_elastic_ep_refusals(tmp_path: Path, serve_args: list[str], flag: str) -> None:
    with pytest.raises(UnsafeArguments) as err:
        check(tmp_path, serve_args)
    assert err.value.flag == flag


async def test_elastic_ep_routes_reach_the_runtime(harness: RouterHarness) -> None:
    record = harness.tmp / "vllm-requests.jsonl"
    harness.faults["vllm"] = f"--record-requests {record}"
    harness.model("moe", "vllm", model_param="moe.safetensors", serve_args=EEP)
    client = await harness.start()
    assert (await client.post("/v1/chat/completions", json=chat("moe"))).status_code == 200
    for op in ("scale_elastic_ep", "is_scaling_elastic_ep"):  # the fake answers them 404
        await client.post(f"/router/v1/vllm/{op}", json={"new_data_parallel_size": 2})
    paths = {r.get("path") for r in harness.records(record)}
    assert {"/scale_elastic_ep", "/is_scaling_elastic_ep"} <= paths, paths
