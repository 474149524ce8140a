"""A1111 fidelity on sd-server (fake backend): progress and interrupt always answer, `info` is
A1111's JSON string with the seed and the public model ID. The `webuiapi` client is used as is
(it is synchronous, so it runs in a thread against the router's real listener)."""

from __future__ import annotations

import asyncio
import json

import pytest
import webuiapi
from hypothesis import given
from hypothesis import strategies as st

from router.media import a1111
from tests.support.harness import RouterHarness, wait_for

pytestmark = pytest.mark.timeout(120)


async def webui(harness: RouterHarness) -> webuiapi.WebUIApi:
    """The client, built in a thread: its constructor already calls the router."""
    assert harness.server is not None
    server = harness.server
    return await asyncio.to_thread(webuiapi.WebUIApi, host=server.host, port=server.port)


# ---- pure --------------------------------------------------------------------------------


def test_idle_progress_lets_wait_for_ready_return() -> None:
    record = a1111.progress_record(a1111.LaneActivity(0, 0, None, None))
    assert record["progress"] == 0.0 and record["state"]["job_count"] == 0
    assert record["textinfo"] is None


def test_busy_progress_counts_running_and_waiting() -> None:
    record = a1111.progress_record(a1111.LaneActivity(1, 2, 1_700_000_000.0, "art-art"))
    assert record["state"]["job_count"] == 3 and record["state"]["job"] == "txt2img"
    assert len(record["state"]["job_timestamp"]) == 14
    assert "art-art" in record["textinfo"]


@given(st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=-1)), st.integers(0, 2**40))
def test_a_missing_or_negative_seed_is_fixed(seed: int | None, chosen: int) -> None:
    request = {"prompt": "p"} if seed is None else {"prompt": "p", "seed": seed}
    body, fields = a1111.fix_seed(json.dumps(request).encode(), chosen)
    assert fields is not None and 0 <= fields["seed"] <= a1111.SEED_MAX
    assert json.loads(body)["seed"] == fields["seed"]


@given(st.integers(0, 2**40))
def test_a_chosen_seed_is_kept(seed: int) -> None:
    raw = json.dumps({"prompt": "p", "seed": seed}).encode()
    assert a1111.fix_seed(raw, 7) == (raw, {"prompt": "p", "seed": seed})


def test_non_json_bodies_pass_unchanged() -> None:
    assert a1111.fix_seed(b"not json", 1) == (b"not json", None)
    assert a1111.fix_seed(b"[1]", 1) == (b"[1]", None)


def test_info_from_the_request_or_the_backend_names_the_public_model() -> None:
    request = {"prompt": "a fox", "seed": 5, "steps": 2, "batch_size": 2, "width": 64}
    built = json.loads(a1111.info_text(request, "", "art-art", img2img=False))
    assert built["seed"] == 5 and built["all_seeds"] == [5, 6] and built["steps"] == 2
    assert built["sd_model_name"] == "art-art" and built["all_prompts"] == ["a fox"] * 2
    backend = json.dumps({"prompt": "a fox", "seed": 5, "sd_model_name": "art.safetensors"})
    merged = json.loads(a1111.info_text(request, backend, "art-art", img2img=True))
    assert merged["sd_model_name"] == "art-art" and merged["seed"] == 5


# ---- through the router, fake sd-server ----------------------------------------------------


def busy(harness: RouterHarness) -> bool:
    return any(view.leases for view in harness.runtimes.views())


async def test_webuiapi_progress_interrupt_and_info_while_sd_server_runs(
    harness: RouterHarness,
) -> None:
    harness.model("art", sdmodel="art.safetensors")  # image ID "art-art"
    harness.faults["sdcpp"] = "--ttft 1.5"  # each generation takes 1.5 s
    client = await harness.start()
    api = await webui(harness)
    assert (await client.get("/sdapi/v1/scripts")).json() == {"txt2img": [], "img2img": []}
    await asyncio.to_thread(api.util_set_model, "art-art")
    assert harness.runtimes.status_of("art") == "ready"
    await asyncio.to_thread(api.util_wait_for_ready, 0.1)  # idle, sd-server active: returns
    slow = asyncio.ensure_future(
        client.post("/sdapi/v1/txt2img", json={"prompt": "slow", "steps": 1}, timeout=30)
    )
    assert await wait_for(lambda: busy(harness), deadline=10)
    progress = await asyncio.to_thread(api.get_progress)
    assert progress["state"]["job_count"] >= 1 and progress["progress"] == 0.0
    assert "art-art" in progress["textinfo"]
    assert await asyncio.to_thread(api.interrupt) == {}
    assert (await client.post("/sdapi/v1/skip")).json() is None
    await asyncio.to_thread(api.util_wait_for_ready, 0.1)  # returns once the job is done
    assert slow.done() and (await slow).status_code == 200
    result = await asyncio.to_thread(api.txt2img, prompt="a red fox", width=64, height=64)
    assert isinstance(result.info, dict), result.info
    assert 0 <= result.info["seed"] <= a1111.SEED_MAX and result.info["all_seeds"]
    assert result.info["sd_model_name"] == "art-art" and result.info["prompt"] == "a red fox"
    assert result.info["width"] == 64 and result.image is not None
    chosen = await asyncio.to_thread(api.txt2img, prompt="again", seed=42, steps=1)
    assert chosen.info["seed"] == 42 and chosen.info["steps"] == 1
