"""A benchmark of the tiny llama-server demo models through the router (real llama-server).

Random weights produce noise; what is checked is that the real backend's own figures arrive:
a measured load, tokens per second from llama-server's timings, and an embeddings request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(120)]


def values(summary: dict[str, Any]) -> dict[str, float]:
    assert all(m["status"] == "success" for m in summary["metrics"]), summary
    return {m["name"]: m["value"] for m in summary["metrics"]}


async def test_a_benchmark_of_the_demo_model_reports_load_time_and_tokens_per_second(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    write_demo_text_kcpps(real_harness, demo_text)
    client = await real_harness.start()
    body = {"model_id": "chat-a", "iterations": 2, "timeout_seconds": 90}
    r = await client.post("/router/v1/benchmarks/run", json=body, timeout=100)
    assert r.status_code == 200, r.text
    record = r.json()
    assert record["status"] == "success", json.dumps(record["sections"])
    runtime = values(record["sections"]["runtime"])
    assert runtime["model_load_ms"] > 0 and runtime["total_start_ms"] >= runtime["model_load_ms"]
    llm = values(record["sections"]["llm"])
    assert llm["tokens_per_second"] > 0 and llm["prompt_tokens_per_second"] > 0
    assert llm["first_completion_ms"] > 0 and llm["completion_tokens"] >= 1
    assert llm["prompt_tokens"] >= 1
    assert record["sections"]["embed"]["status"] == "skipped"
    listed = (await client.get("/router/v1/models")).json()["data"]
    mine = next(m for m in listed if m["id"] == "chat-a")
    assert mine["benchmark"]["run_id"] == record["run_id"]


async def test_a_benchmark_of_the_demo_embeddings_model(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    write_demo_text_kcpps(real_harness, demo_text)
    client = await real_harness.start()
    body = {"model_id": "embed", "sections": ["embed"], "timeout_seconds": 90}
    record = (await client.post("/router/v1/benchmarks/run", json=body, timeout=100)).json()
    assert record["status"] == "success", json.dumps(record["sections"])
    embed = values(record["sections"]["embed"])
    assert embed["request_ms"] > 0 and embed["dimensions"] > 0
