"""Memory-aware residency against the real llama-server (issue 25): with `runtime.residency:
memory` and a host budget that holds two demo models but not three, two alternating models
stay resident; a third evicts the cheaper one, which the dry run named; a long stream on the
victim finishes intact before it stops; `keep_alive: 0` still unloads after the answer;
`/api/ps` reports the ledger's sizes (read with the `ollama` client); and a model larger than
the whole budget gets a clear 400 with nothing launched.

The budget is computed from the router's own estimates for the demo models, so the arithmetic
holds on any machine (each is about 29 MiB: docs/residency.md's worked example); after a load
the ledger holds llama-server's measured figure, a little below the estimate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ollama
import pytest

from router.appkeys import CATALOG
from router.demo_models import write_kcpps
from router.domain import Lane
from router.memory.eviction import reload_cost
from router.runtime.state import spec_for
from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness, wait_for

pytestmark = [pytest.mark.real, pytest.mark.timeout(180)]


async def _started(h: RouterHarness, demo: dict[str, Path], fit: int, **runtime: Any) -> Any:
    """Start with a host budget for `fit` demo chat models (they all estimate the same)."""
    write_demo_text_kcpps(h, demo)
    write_kcpps(h.kcpps_dir / "chat-c.kcpps", model_param=demo["chat-a"])  # a third config
    write_kcpps(h.kcpps_dir / "huge.kcpps", model_param=demo["chat-a"], contextsize=1 << 20)
    base = h.settings(residency="memory", **runtime)
    await h.start(base)
    assert h.app is not None
    one = _need(h, "chat-a")
    await h.close()
    memory = base.memory.model_copy(update={"host_budget": fit * one, "reserve": 0})
    await h.start(base.model_copy(update={"memory": memory}))
    assert h.server is not None
    return ollama.AsyncClient(host=str(h.server.make_url("")).rstrip("/"), timeout=120)


def _need(h: RouterHarness, model_id: str) -> int:
    assert h.app is not None
    spec = spec_for(h.app[CATALOG].require(model_id), Lane.TEXT)
    return h.runtimes.ledger.holdings.estimate(spec).devices["host"]


def _held(h: RouterHarness, model_id: str) -> int:
    assert h.app is not None
    spec = spec_for(h.app[CATALOG].require(model_id), Lane.TEXT)
    return h.runtimes.ledger.holdings.need(spec)[0].total


def _resident(h: RouterHarness) -> set[str]:
    return {v.config.id for v in h.runtimes.views() if v.state.value in ("loading", "ready")}


async def _say(client: ollama.AsyncClient, model: str, **extra: Any) -> Any:
    return await client.chat(
        model=model,
        messages=[{"role": "user", "content": "Hello world"}],
        options={"num_predict": 4, "temperature": 0},
        **extra,
    )


async def test_two_that_fit_stay_resident_and_a_third_evicts_the_cheaper(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await _started(real_harness, demo_text, fit=2)
    for i in range(20):
        assert (await _say(client, "chat-a" if i % 2 == 0 else "chat-b")).done
    assert real_harness.runtimes.spawn_count == 2  # two loads in all, no swap
    assert _resident(real_harness) == {"chat-a", "chat-b"}
    await real_harness.runtimes.figures.settled()  # measured load times: the reload cost
    # The cheaper to reload (measured load time x recent uses), as the live ledger prices it.
    ledger = real_harness.runtimes.live_ledger()
    cheaper = min(ledger.residents, key=lambda r: (reload_cost(r), r.last_used)).model
    keeper = ({"chat-a", "chat-b"} - {cheaper}).pop()

    assert real_harness.client is not None
    dry = await real_harness.client.post(
        "/router/v1/load", json={"model": "chat-c", "dry_run": True}
    )
    plan = dry.json()
    assert plan["fits"] is True and plan["wait"] == "none"
    assert [v["model"] for v in plan["evict"]] == [cheaper]
    assert real_harness.runtimes.spawn_count == 2  # the dry run loaded nothing

    assert (await _say(client, "chat-c")).done
    assert _resident(real_harness) == {keeper, "chat-c"}  # exactly the dry run's victim
    assert real_harness.runtimes.spawn_count == 3

    # /api/ps: size and size_vram as the ledger says (host only here: size_vram 0); the
    # figures are the measured ones once the measurements after the loads are in.
    await real_harness.runtimes.figures.settled()
    status = (await real_harness.client.get("/router/v1/status")).json()
    held = {r["model"]: r["memory"] for r in status["runtimes"] if r["state"] == "ready"}
    running = {m.model: m for m in (await client.ps()).models}
    assert set(running) == {keeper, "chat-c"}
    for model, entry in running.items():
        assert held[model]["source"] == "measured"  # llama-server's own report (-lv 4)
        assert entry.size == held[model]["bytes"] == _held(real_harness, model)
        assert entry.size_vram == 0


async def test_a_long_stream_on_the_victim_finishes_before_it_stops(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await _started(real_harness, demo_text, fit=1, max_batch_wait=0)
    assert (await _say(client, "chat-b")).done
    chunks: list[Any] = []

    async def stream() -> None:
        async for part in await client.chat(
            model="chat-b",
            messages=[{"role": "user", "content": "Tell me a long story"}],
            options={"num_predict": 400, "temperature": 0},
            stream=True,
        ):
            chunks.append(part)

    streaming = asyncio.create_task(stream())
    assert await wait_for(lambda: bool(chunks), 60)  # the stream is running
    other = asyncio.create_task(_say(client, "chat-a"))  # needs chat-b gone
    await streaming
    assert chunks[-1].done and chunks[-1].eval_count == 400  # intact: every token, then done
    assert "".join(c.message.content or "" for c in chunks)
    assert (await other).done
    assert _resident(real_harness) == {"chat-a"} and real_harness.runtimes.spawn_count == 2


async def test_keep_alive_zero_still_unloads_after_the_answer(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await _started(real_harness, demo_text, fit=2)
    assert (await _say(client, "chat-a")).done
    reply = await _say(client, "chat-b", keep_alive=0)
    assert reply.done and reply.eval_count
    assert await wait_for(lambda: real_harness.runtimes.status_of("chat-b") == "unloaded", 20)
    assert _resident(real_harness) == {"chat-a"}


async def test_larger_than_the_whole_budget_is_refused_and_nothing_launched(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await _started(real_harness, demo_text, fit=2)
    with pytest.raises(ollama.ResponseError) as refused:
        await _say(client, "huge")
    assert refused.value.status_code == 400
    message = str(refused.value.error)
    assert "'huge'" in message and "host budget" in message and "memory.host_budget" in message
    assert real_harness.runtimes.spawn_count == 0 and real_harness.runtimes.views() == ()
