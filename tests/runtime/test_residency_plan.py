"""The live ledger and the one load decision (issue 25): `POST /router/v1/load {"dry_run": true}`
answers the plan and loads nothing; the real load right after it stops exactly the runtimes the
plan named; a model larger than the whole budget is refused before anything is queued.

A real router with the fake backend (tests/support/harness.py). The fake model files are sparse
files of a chosen size, so the estimates (file size plus margin plus process overhead) are
known; budgets are set from the router's own estimates so the arithmetic holds on any machine.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from click.testing import CliRunner

from router.appkeys import CATALOG
from router.cli import main
from router.domain import Lane
from router.runtime.state import spec_for
from tests.support.harness import RouterHarness
from tests.support.residency import no_measurement  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("no_measurement")

MIB = 1 << 20


def _sized(harness: RouterHarness, model_id: str, size: int, **fields: Any) -> None:
    harness.model(model_id, **fields)
    name = next(v for k, v in fields.items() if k.endswith("model")) if fields else None
    os.truncate(harness.models_dir / (name or f"{model_id}.gguf"), size)


def _host_need(harness: RouterHarness, model_id: str, lane: Lane) -> int:
    assert harness.app is not None
    config = harness.app[CATALOG].require(model_id)
    return harness.runtimes.ledger.holdings.estimate(spec_for(config, lane)).devices["host"]


async def _budgeted(harness: RouterHarness, budget: int, **runtime: Any) -> Any:
    base = harness.settings(**({"residency": "memory"} | runtime))
    memory = base.memory.model_copy(update={"host_budget": budget, "reserve": 0})
    return await harness.start(base.model_copy(update={"memory": memory}))


def _keys(harness: RouterHarness) -> set[str]:
    return {v.config.id for v in harness.runtimes.views() if v.state.value != "stopped"}


async def test_dry_run_names_what_the_load_then_evicts(harness: RouterHarness) -> None:
    _sized(harness, "chat-a", 8 * MIB)
    _sized(harness, "emb-a", 4 * MIB, embeddingsmodel="emb-a.gguf")
    _sized(harness, "ears", 2 * MIB, whispermodel="ears.bin")
    client = await _budgeted(harness, 1 << 40)  # measured below, then restarted
    needs = {
        "chat-a": _host_need(harness, "chat-a", Lane.TEXT),
        "emb-a": _host_need(harness, "emb-a", Lane.EMBEDDINGS),
        "ears": _host_need(harness, "ears", Lane.VOICE),
    }
    await harness.close()
    # chat-a and emb-a fit together; ears fits only once one of them is gone.
    budget = needs["chat-a"] + needs["emb-a"] + needs["ears"] - 1
    client = await _budgeted(harness, budget)
    for model in ("chat-a", "chat-a", "chat-a", "emb-a"):  # chat-a used thrice: dearer
        assert (await client.post("/router/v1/load", json={"model": model})).status_code == 200
    spawned = harness.runtimes.spawn_count

    dry = await client.post("/router/v1/load", json={"model": "ears", "dry_run": True})
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["model"] == "ears" and plan["fits"] is True and plan["wait"] == "none"
    assert [v["model"] for v in plan["evict"]] == ["emb-a"]
    assert plan["evict"][0]["lane"] == "embeddings" and "idle" in plan["evict"][0]["reason"]
    (host,) = plan["devices"]
    used = needs["chat-a"] + needs["emb-a"]
    assert host == {
        "device": "host",
        "budget": budget,
        "used": used,
        "estimate": needs["ears"],
        "source": "estimate",
    }
    assert harness.runtimes.spawn_count == spawned and _keys(harness) == {"chat-a", "emb-a"}

    loaded = await client.post("/router/v1/load", json={"model": "ears"})
    assert loaded.status_code == 200, loaded.text
    assert _keys(harness) == {"chat-a", "ears"}  # exactly the dry run's list was stopped
    status = (await client.get("/router/v1/status")).json()
    (row,) = [d for d in status["devices"] if d["device"] == "host"]
    assert row["used"] == needs["chat-a"] + needs["ears"]


async def test_the_lane_runtime_is_a_forced_victim(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.model("chat-b")
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    plan = (await client.post("/router/v1/load", json={"model": "chat-b", "dry_run": True})).json()
    assert plan["evict"] == [
        {"model": "chat-a", "lane": "text", "reason": "the text lane holds one runtime at a time"}
    ]
    assert plan["fits"] is True and plan["wait"] == "none"
    # Already resident: nothing to evict.
    same = (await client.post("/router/v1/load", json={"model": "chat-a", "dry_run": True})).json()
    assert same["evict"] == [] and same["fits"] is True
    assert _keys(harness) == {"chat-a"}


async def test_larger_than_the_budget_is_refused_before_queueing(harness: RouterHarness) -> None:
    _sized(harness, "huge", 64 * MIB)
    client = await _budgeted(harness, 48 * MIB)
    for body in ({"model": "huge", "dry_run": True}, {"model": "huge"}):
        answer = await client.post("/router/v1/load", json=body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "model_too_large" and error["param"] == "model"
        assert "'huge'" in error["message"] and "host budget is 48 MiB" in error["message"]
    chat = await client.post(
        "/v1/chat/completions",
        json={"model": "huge", "messages": [{"role": "user", "content": "x"}]},
    )
    assert chat.status_code == 400 and chat.json()["error"]["code"] == "model_too_large"
    assert harness.runtimes.spawn_count == 0 and harness.runtimes.views() == ()


async def test_lane_residency_reports_memory_but_never_acts(harness: RouterHarness) -> None:
    _sized(harness, "huge", 64 * MIB)
    client = await _budgeted(harness, 48 * MIB, residency="lane")
    plan = (await client.post("/router/v1/load", json={"model": "huge", "dry_run": True})).json()
    assert plan["fits"] is False and plan["evict"] == [] and plan["wait"] == "none"
    assert (await client.post("/router/v1/load", json={"model": "huge"})).status_code == 200


async def test_dry_run_flag_must_be_a_boolean(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    answer = await client.post("/router/v1/load", json={"model": "chat-a", "dry_run": "yes"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "dry_run"
    assert harness.runtimes.spawn_count == 0


async def test_cli_dry_run(harness: RouterHarness) -> None:
    harness.model("chat-a")
    client = await harness.start()
    url = str(client.base_url).rstrip("/")
    result = await asyncio.to_thread(
        CliRunner().invoke, main, ["load", "chat-a", "--dry-run", "--url", url]
    )
    assert result.exit_code == 0, result.output
    assert '"fits": true' in result.output and '"evict": []' in result.output
    assert harness.runtimes.spawn_count == 0
