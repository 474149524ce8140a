"""vLLM Elastic Expert Parallelism: `--enable-elastic-ep` (and what it needs) pass the
serve_args allowlist, so the contract's operational routes reach the runtime."""

from __future__ import annotations

import pytest

from backends.base import UnsafeArguments
from router.domain import Lane
from tests.harness import RouterHarness, chat
from tests.test_backends import VLLM, make_settings, vllm_config
from tests.test_vllm_surface import MODEL, reached, recording, vllm_model

pytestmark = pytest.mark.timeout(60)
EEP = ["--enable-elastic-ep", "--enable-expert-parallel", "--data-parallel-size", "2",
       "--data-parallel-backend", "ray", "--enable-eplb"]  # fmt: skip


def test_elastic_ep_flags_pass_the_allowlist() -> None:
    argv = VLLM.argv(vllm_config(serve_args=EEP), Lane.TEXT, 1, make_settings())
    assert argv[-len(EEP) :] == EEP


@pytest.mark.parametrize(
    ("serve_args", "flag"),
    [
        (["--enable-elastic-ep"], "--enable-elastic-ep"),  # needs expert parallelism
        (["--data-parallel-backend", "tcp"], "--data-parallel-backend"),
        (["--data-parallel-rpc-port", "5"], "--data-parallel-rpc-port"),
    ],
)
def test_elastic_ep_refusals(serve_args: list[str], flag: str) -> None:
    with pytest.raises(UnsafeArguments) as err:
        VLLM.argv(vllm_config(serve_args=serve_args), Lane.TEXT, 1, make_settings())
    assert err.value.flag == flag


async def test_elastic_ep_routes_reach_the_runtime(harness: RouterHarness) -> None:
    record = recording(harness)
    vllm_model(harness, serve_args=EEP)
    client = await harness.start()
    assert (await client.post("/v1/chat/completions", json=chat(MODEL))).status_code == 200
    for op in ("scale_elastic_ep", "is_scaling_elastic_ep"):  # the fake answers them 404
        await client.post(f"/router/v1/vllm/{op}", json={"new_data_parallel_size": 2})
    paths = [p for _, p in reached(harness, record)]
    assert "/scale_elastic_ep" in paths and "/is_scaling_elastic_ep" in paths
