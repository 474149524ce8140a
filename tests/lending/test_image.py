"""Lending on the image lane between real routers (docs/lending.md): the master's slow image
model `pic` lends a backlog of OpenAI image generations to the slave's fast `pic2`.

The fake sd backend takes `--ttft` per image, one image at a time (`--parallel 1`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.support.harness import RouterHarness, until
from tests.support.lending import rows, slave_known, summary_leases, two_nodes

IMAGE_LINKS = "/router/v1/site/routing-groups"
N = 8
LINK = {
    "anchor": {"node_id": "m", "model_id": "pic"},
    "lends_to": [{"node_id": "s1", "model_id": "pic2"}],
    "borrows_from": [],
}


def image(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": "a lighthouse", "n": 1, "size": "64x64"}


async def burst(client: httpx.AsyncClient) -> tuple[float, list[int]]:
    async def one() -> int:
        r = await client.post("/v1/images/generations", json=image("pic"))
        assert r.status_code != 200 or r.json()["data"][0]["b64_json"], r.text
        return r.status_code

    started = time.monotonic()
    statuses = await asyncio.gather(*(one() for _ in range(N)))
    return time.monotonic() - started, list(statuses)


async def test_an_image_backlog_is_lent_to_an_idle_fast_helper(tmp_harness: RouterHarness) -> None:
    # Before the routers are made: their backend binaries are written with these switches.
    tmp_harness.faults_for_model.update(
        {"pic": "--ttft 0.4 --parallel 1", "pic2": "--ttft 0.1 --parallel 1"}
    )
    master, slave = two_nodes(tmp_harness)
    await master.start()
    await slave.start()
    async with httpx.AsyncClient(base_url=master.base, timeout=120) as client:
        assert await until(lambda: slave_known(client), True)
        for model in ("pic", "pic2"):  # both loaded, so neither run pays a load
            r = await client.post("/v1/images/generations", json=image(model))
            assert r.status_code == 200, r.text
        without, statuses = await burst(client)
        assert statuses == [200] * N
        local0, lent0 = await rows(client, master, "pic"), await rows(client, slave, "pic2")

        assert (await client.post(IMAGE_LINKS, json=LINK)).status_code == 200
        running = asyncio.create_task(burst(client))
        leases: list[dict[str, Any]] = []
        while not running.done() and not leases:
            leases = [x for x in await summary_leases(client) if x["lane"] == "image"]
            await asyncio.sleep(0.05)
        with_link, statuses = await running
        assert statuses == [200] * N  # no client sees a helper's refusal
        assert [
            (x["owner_model_id"], x["helper_node_id"], x["helper_model_id"]) for x in leases
        ] == [("pic", "s1", "pic2")], leases
        local1, lent1 = await rows(client, master, "pic"), await rows(client, slave, "pic2")
        assert lent1 - lent0 >= 1, "the helper served none of the image backlog"
        assert (local1 - local0) + (lent1 - lent0) == N  # each request recorded once
        assert with_link < 0.85 * without, (with_link, without)
