"""Issue 35 through HTTP with real scoped keys (created by the admin API, sent as bearer
tokens) on fake backends: the key's caller reaches the queue, which serves the waiting
interactive request first, holds a key's requests over its cap without refusing them, and
shows each waiting request's key name and class in the status."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from router.domain import Lane
from tests.support.harness import RouterHarness, chat, wait_for

CHAT = "/v1/chat/completions"
ADMIN = "adm-fair-queue-test-7d41a9"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def _key(client: httpx.AsyncClient, **body: Any) -> dict[str, str]:
    r = await client.post("/router/v1/keys", json=body, headers=bearer(ADMIN))
    assert r.status_code == 201, r.text
    return bearer(r.json()["secret"])


async def _started(harness: RouterHarness) -> httpx.AsyncClient:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--token-rate 20"
    base = harness.settings(max_in_flight=2)
    settings = base.model_copy(
        update={
            "security": base.security.model_copy(update={"profile": "secure"}),
            "auth": base.auth.model_copy(update={"admin_keys": (ADMIN,)}),
        }
    )
    client = await harness.start(settings)
    load = await client.post("/router/v1/load", json={"model": "chat-a"}, headers=bearer(ADMIN))
    assert load.status_code == 200, load.text
    return client


async def test_status_names_each_waiting_requests_key_and_class(harness: RouterHarness) -> None:
    client = await _started(harness)
    person = await _key(client, name="alice")
    agent = await _key(client, name="nightly", priority="batch", max_concurrent=1)

    def send(headers: dict[str, str], tokens: int) -> asyncio.Task[httpx.Response]:
        body = chat("chat-a", max_tokens=tokens)
        return asyncio.create_task(client.post(CHAT, json=body, headers=headers))

    running = send(agent, 40)  # about 2 s; the runtime has room for two
    assert await wait_for(lambda: harness.runtimes.views()[0].leases == 1, 20)
    # Over its cap of one: the agent's next two wait, though the runtime has room.
    batch = [send(agent, 1) for _ in range(2)]
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 2, 20)
    assert harness.runtimes.views()[0].leases == 1
    queue = (await client.get("/router/v1/status", headers=bearer(ADMIN))).json()["queue"]
    rows = [(r["key"], r["class"], r["position"]) for r in queue["text"]]
    assert rows == [("nightly", "batch", 1), ("nightly", "batch", 2)]

    answers = [await task for task in (running, *batch)]
    assert [a.status_code for a in answers] == [200] * 3  # waited, never refused

    # With the slots taken, a person's request goes ahead of the agent's waiting ones.
    hold = [send(person, 40), send(agent, 40)]
    assert await wait_for(lambda: harness.runtimes.views()[0].leases == 2, 20)
    later = [send(agent, 1)]
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 1, 20)
    mine = send(person, 1)
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 2, 20)
    queue = (await client.get("/router/v1/status", headers=bearer(ADMIN))).json()["queue"]
    rows = [(r["key"], r["class"], r["position"]) for r in queue["text"]]
    assert rows == [("alice", "interactive", 1), ("nightly", "batch", 2)]
    answers = [await task for task in (*hold, mine, *later)]
    assert [a.status_code for a in answers] == [200] * 4
    waits = [float(a.headers["X-Tensors-Queue-Wait-Ms"]) for a in answers]
    assert waits[2] < waits[3]  # the person, though later, waited less


async def test_a_batch_keys_image_job_is_queued_with_its_class(harness: RouterHarness) -> None:
    """sd-server's job API leases its runtime outside the pipeline: it queues as its key's
    caller too, and a model outside the key's list is refused before it queues."""
    harness.model("art", sdmodel="art.safetensors")  # image ID "art-art"
    harness.faults["sdcpp"] = "--startup-delay 3"  # the job waits for art's load
    base = harness.settings()
    settings = base.model_copy(
        update={
            "security": base.security.model_copy(update={"profile": "secure"}),
            "auth": base.auth.model_copy(update={"admin_keys": (ADMIN,)}),
        }
    )
    client = await harness.start(settings)
    agent = await _key(client, name="nightly", priority="batch")
    job = {"prompt": "x", "model": "art-art"}
    task = asyncio.create_task(client.post("/sdcpp/v1/img_gen", json=job, headers=agent))
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.IMAGE) == 1, 20)
    queue = (await client.get("/router/v1/status", headers=bearer(ADMIN))).json()["queue"]
    assert [(r["key"], r["class"]) for r in queue["image"]] == [("nightly", "batch")]
    answer = await task
    assert answer.status_code == 202, answer.text
    other = await _key(client, name="pixels", models=["pix-*"])
    refused = await client.post("/sdcpp/v1/img_gen", json=job, headers=other)
    assert refused.status_code == 403 and "art-art" in refused.text
