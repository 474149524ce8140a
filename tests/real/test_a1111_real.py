"""The `webuiapi` client, unmodified, against the real sd-server through the router: progress and
interrupt answer while the image model runs, `info` is A1111's JSON with the seed and the public
model ID (docs/media.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import webuiapi

from tests.real.test_router_media import sd_router
from tests.support.harness import RouterHarness, wait_for

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]


async def test_webuiapi_against_sd_server(real_harness: RouterHarness, demo_sdxs: Path) -> None:
    image_id = await sd_router(real_harness, demo_sdxs)
    assert real_harness.server is not None and real_harness.client is not None
    server = real_harness.server
    api = await asyncio.to_thread(webuiapi.WebUIApi, host=server.host, port=server.port)
    await asyncio.to_thread(api.util_set_model, image_id)
    assert real_harness.runtimes.status_of("sdxs") == "ready"
    await asyncio.to_thread(api.util_wait_for_ready, 0.1)  # sd-server active and idle

    body = {"prompt": "a slow fox", "width": 64, "height": 64, "steps": 4, "seed": 9}
    running = asyncio.ensure_future(
        real_harness.client.post("/sdapi/v1/txt2img", json=body, timeout=120)
    )
    views = real_harness.runtimes.views
    # A tiny model may finish before the poll sees its lease: then the answer is there instead.
    leased = await wait_for(lambda: running.done() or any(v.leases for v in views()), 30)
    assert leased
    progress = await asyncio.to_thread(api.get_progress)
    assert set(progress) >= {"progress", "eta_relative", "state", "current_image", "textinfo"}
    assert progress["state"]["job_count"] >= 1 or running.done()
    assert await asyncio.to_thread(api.interrupt) == {}
    await asyncio.to_thread(api.util_wait_for_ready, 0.1)
    answer = await running
    assert answer.status_code == 200, answer.text

    result = await asyncio.to_thread(
        api.txt2img, prompt="a red fox", width=64, height=64, steps=1, seed=-1
    )
    assert result.image is not None and result.image.size == (64, 64)
    assert isinstance(result.info, dict), result.info
    assert 0 <= result.info["seed"] < 2**32 and result.info["sd_model_name"] == image_id
    assert result.info["prompt"] == "a red fox"
