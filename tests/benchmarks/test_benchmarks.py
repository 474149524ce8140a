"""Benchmarks through a real router (tests/support/harness.py) with fake backends and a real SQLite file:
`POST /router/v1/benchmarks/run`, `GET /router/v1/benchmarks`, `/router/v1/models`' benchmark
field, progress on `/router/v1/events`, one run per node, and `tensor-router benchmark`."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
from typing import Any

import httpx
import pytest

from router.appkeys import EVENTS
from tests.support.harness import RouterHarness

RUN = "/router/v1/benchmarks/run"
LIST = "/router/v1/benchmarks"
WAIT_S = 20.0  # bounds for events on a busy 2-core machine (a fake backend starts in ~0.3 s)


def stored_rows(h: RouterHarness) -> list[tuple[Any, ...]]:
    """Straight from the database file (the store commits before a run's answer)."""
    with sqlite3.connect(h.tmp / "data" / "router.sqlite") as db:
        return db.execute(
            "SELECT id, section, model_id, type, status, metrics_json FROM benchmark_runs"
        ).fetchall()


def metric(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in summary["metrics"] if m["name"] == name)


async def test_a_general_run_measures_the_lanes_the_model_has_and_skips_the_rest(
    harness: RouterHarness,
) -> None:
    harness.model("chat")
    client = await harness.start()
    r = await client.post(RUN, json={"model_id": "chat", "iterations": 2})
    assert r.status_code == 200, r.text
    record = r.json()
    assert record["node_id"] == "local" and record["model_id"] == "chat"
    assert (record["type"], record["section"], record["status"]) == ("general", "run", "success")
    assert record["iterations"] == 2 and record["option_changes"] == []
    sections = record["sections"]
    assert list(sections) == ["runtime", "llm", "embed", "image", "voice", "music"]
    for name in ("embed", "image", "voice", "music"):
        assert sections[name]["status"] == "skipped", name
        assert "has no" in sections[name]["error"] and sections[name]["metrics"] == []
    runtime, llm = sections["runtime"], sections["llm"]
    assert runtime["status"] == "success" and metric(runtime, "model_load_ms")["value"] > 0
    assert llm["status"] == "success"
    for name in (
        "request_ms",
        "first_completion_ms",
        "tokens_per_second",
        "prompt_tokens_per_second",
        "completion_tokens",
        "prompt_tokens",
    ):
        m = metric(llm, name)
        assert m["status"] == "success" and m["value"] > 0, m
    assert metric(llm, "completion_tokens")["value"] == 32  # the fake answers max_tokens
    counts = {m["name"]: m["value"] for m in record["metrics"]}
    assert counts["sections_success"] == 2 and counts["sections_skipped"] == 4
    assert counts["total_run_ms"] > 0
    # Stored: one row per section and one for the run, all finished.
    rows = stored_rows(harness)
    assert len(rows) == 7 and {row[4] for row in rows} == {"success", "skipped"}
    assert {row[0] for row in rows} == {record["run_id"]}
    # The model is left loaded by the run's own load.
    assert harness.runtimes.status_of("chat") == "ready"


async def test_a_kobold_model_runs_its_media_sections(harness: RouterHarness) -> None:
    harness.model("kart", mode="kobold", sdmodel="kart.safetensors", whispermodel="w.bin")
    client = await harness.start()
    r = await client.post(RUN, json={"model_id": "kart", "sections": ["image", "voice", "llm"]})
    record = r.json()
    assert r.status_code == 200 and record["type"] == "section", record
    assert list(record["sections"]) == ["llm", "image", "voice"]
    assert record["sections"]["llm"]["status"] == "skipped"
    image, voice = record["sections"]["image"], record["sections"]["voice"]
    assert image["status"] == "success" and metric(image, "images")["value"] == 1
    assert voice["status"] == "success" and metric(voice, "realtime_factor")["value"] > 0
    assert record["status"] == "success"


async def test_get_returns_latest_sections_and_history_newest_first(
    harness: RouterHarness,
) -> None:
    harness.model("chat")
    client = await harness.start()
    empty = (await client.get(LIST, params={"model_id": "chat"})).json()
    assert empty == {
        "node_id": "local",
        "model_id": "chat",
        "latest": None,
        "sections": {},
        "history": [],
    }
    first = (await client.post(RUN, json={"model_id": "chat"})).json()
    second = (await client.post(RUN, json={"model_id": "chat", "sections": ["llm"]})).json()
    answer = (await client.get(LIST, params={"model_id": "chat"})).json()
    assert [h["run_id"] for h in answer["history"]] == [second["run_id"], first["run_id"]]
    assert answer["latest"] == answer["history"][0]
    assert answer["latest"]["section"] == "run" and answer["latest"]["type"] == "section"
    # The newest summary of each section: llm from the second run, runtime from the first.
    assert answer["sections"]["llm"]["run_id"] == second["run_id"]
    assert answer["sections"]["runtime"]["run_id"] == first["run_id"]
    assert answer["sections"]["llm"] == second["sections"]["llm"]
    limited = (await client.get(LIST, params={"model_id": "chat", "limit": 1})).json()
    assert [h["run_id"] for h in limited["history"]] == [second["run_id"]]


async def test_models_listing_carries_the_latest_benchmark(harness: RouterHarness) -> None:
    harness.model("chat")
    harness.model("other")
    client = await harness.start()
    before = {m["id"]: m for m in (await client.get("/router/v1/models")).json()["data"]}
    assert before["chat"]["benchmark"] is None
    record = (await client.post(RUN, json={"model_id": "chat", "sections": ["llm"]})).json()
    after = {m["id"]: m for m in (await client.get("/router/v1/models")).json()["data"]}
    assert after["chat"]["benchmark"]["run_id"] == record["run_id"]
    assert after["chat"]["benchmark"]["status"] == "success"
    assert after["other"]["benchmark"] is None


@pytest.mark.parametrize(
    ("body", "status", "kind", "param"),
    [
        ({"model_id": "chat", "sections": ["llm", "nope"]}, 400, "benchmark_error", "sections"),
        ({"model_id": "chat", "iterations": 0}, 400, "invalid_request_error", "iterations"),
        ({"model_id": "chat", "iterations": 21}, 400, "invalid_request_error", "iterations"),
        (
            {"model_id": "chat", "timeout_seconds": 7201},
            400,
            "invalid_request_error",
            "timeout_seconds",
        ),
        ({"iterations": 1}, 400, "invalid_request_error", "model_id"),
        ({"model_id": "ghost"}, 404, "not_found_error", None),
        ({"model_id": "chat", "node_id": "elsewhere"}, 404, "not_found_error", "node_id"),
    ],
)
async def test_refusals_store_nothing_and_start_nothing(
    harness: RouterHarness, body: dict[str, Any], status: int, kind: str, param: str | None
) -> None:
    harness.model("chat")
    client = await harness.start()
    r = await client.post(RUN, json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == kind and error["param"] == param
    assert stored_rows(harness) == [] and harness.runtimes.views() == ()


async def test_bodies_are_capped_and_must_be_json(harness: RouterHarness) -> None:
    harness.model("chat")
    settings = harness.settings()
    limits = settings.limits.model_copy(update={"max_control_body_mb": 0.01})
    client = await harness.start(settings.model_copy(update={"limits": limits}))
    huge = json.dumps({"model_id": "chat", "pad": "x" * 20_000})
    assert (await client.post(RUN, content=huge)).status_code == 413
    assert (await client.post(RUN, content=b"{nope")).status_code == 400
    assert (await client.post(RUN)).status_code == 400
    assert stored_rows(harness) == []


async def test_get_checks_its_query(harness: RouterHarness) -> None:
    harness.model("chat")
    client = await harness.start()
    assert (await client.get(LIST)).json()["error"]["param"] == "model_id"
    assert (await client.get(LIST, params={"model_id": "ghost"})).status_code == 404
    other = await client.get(LIST, params={"model_id": "chat", "node_id": "elsewhere"})
    assert other.status_code == 404 and other.json()["error"]["param"] == "node_id"
    bad = await client.get(LIST, params={"model_id": "chat", "limit": "0"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


async def read_events(
    client: httpx.AsyncClient, until: str, into: list[dict[str, Any]], subscribed: asyncio.Event
) -> None:
    async with client.stream("GET", "/router/v1/events", timeout=None) as response:
        subscribed.set()
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                into.append(json.loads(line[5:]))
                if into[-1]["event"] == until:
                    return


async def test_progress_is_published_on_the_event_stream(harness: RouterHarness) -> None:
    harness.model("chat")
    client = await harness.start()
    seen: list[dict[str, Any]] = []
    subscribed = asyncio.Event()
    reader = asyncio.create_task(read_events(client, "benchmark_finished", seen, subscribed))
    await asyncio.wait_for(subscribed.wait(), WAIT_S)
    # The handler subscribes just after its headers are out: ping the bus until the stream
    # carries the ping, so the run's first event cannot be published before the subscription.
    assert harness.app is not None
    async with asyncio.timeout(WAIT_S):
        while not any(e["event"] == "test_ping" for e in seen):
            harness.app[EVENTS].publish("test_ping")
            await asyncio.sleep(0.05)
    record = (
        await client.post(RUN, json={"model_id": "chat", "sections": ["runtime", "llm"]})
    ).json()
    await asyncio.wait_for(reader, WAIT_S)
    mine = [e for e in seen if e["event"].startswith("benchmark_")]
    assert [(e["event"], e.get("section"), e.get("status")) for e in mine] == [
        ("benchmark_started", None, None),
        ("benchmark_section", "runtime", "running"),
        ("benchmark_section", "runtime", "success"),
        ("benchmark_section", "llm", "running"),
        ("benchmark_section", "llm", "success"),
        ("benchmark_finished", None, "success"),
    ]
    assert {e["run_id"] for e in mine} == {record["run_id"]}
    assert mine[0]["sections"] == ["runtime", "llm"] and mine[0]["model_id"] == "chat"
    assert mine[-1]["summary"]["run_id"] == record["run_id"]
    # The load itself is on the same stream, between the runtime section's two events.
    kinds = [e["event"] for e in seen]
    assert (
        kinds.index("benchmark_started") < kinds.index("ready") < kinds.index("benchmark_finished")
    )


async def test_one_run_per_node_a_second_is_409_until_the_first_ends(
    harness: RouterHarness,
) -> None:
    harness.model("chat")
    harness.faults["llamacpp"] = "--ttft 1.5"  # the first token takes 1.5 s
    client = await harness.start()
    assert harness.app is not None
    async with harness.app[EVENTS].subscribe() as queue:
        first = asyncio.create_task(
            client.post(RUN, json={"model_id": "chat", "sections": ["llm"]})
        )
        while (await asyncio.wait_for(queue.get(), WAIT_S))["event"] != "benchmark_started":
            pass
        busy = await client.post(RUN, json={"model_id": "chat", "sections": ["llm"]})
        # A run in progress is visible: its rows are written when they start.
        during = (await client.get(LIST, params={"model_id": "chat"})).json()
    assert busy.status_code == 409, busy.text
    error = busy.json()["error"]
    assert (error["type"], error["code"]) == ("benchmark_error", "benchmark_running")
    assert during["latest"]["status"] == "running" and during["latest"]["finished_at"] is None
    done = await asyncio.wait_for(first, WAIT_S)
    assert during["latest"]["run_id"] == done.json()["run_id"]
    assert done.json()["status"] == "success"
    assert done.json()["run_id"] in error["message"]
    # Free again once it has finished.
    again = await client.post(RUN, json={"model_id": "chat", "sections": ["llm"]})
    assert again.status_code == 200 and again.json()["run_id"] != done.json()["run_id"]
    assert len({row[0] for row in stored_rows(harness)}) == 2


async def test_a_section_past_timeout_seconds_fails_with_the_reason(
    harness: RouterHarness,
) -> None:
    harness.model("chat")
    harness.faults["llamacpp"] = "--ttft 30"
    client = await harness.start()
    started = time.monotonic()
    body = {"model_id": "chat", "sections": ["llm"], "timeout_seconds": 1}
    record = (await client.post(RUN, json=body)).json()
    assert time.monotonic() - started < 15  # cut at the deadline, not at the backend's pace
    llm = record["sections"]["llm"]
    assert llm["status"] == "failed" and llm["error"] == "timed out after 1s (timeout_seconds)"
    assert record["status"] == "failed" and record["error"] == "failed sections: llm"
    assert {row[4] for row in stored_rows(harness)} == {"failed"}
    # The lease was given back: nothing is left in flight on the runtime.
    assert [v.leases for v in harness.runtimes.views()] == [0]


async def test_sections_left_after_the_deadline_fail_without_starting(
    harness: RouterHarness,
) -> None:
    harness.model("both", mode="kobold", model_param="both.gguf", sdmodel="both.safetensors")
    harness.faults["kobold"] = "--ttft 30"
    client = await harness.start()
    body = {"model_id": "both", "sections": ["llm", "image"], "timeout_seconds": 1}
    record = (await client.post(RUN, json=body)).json()
    image = record["sections"]["image"]
    assert image["status"] == "failed" and image["metrics"] == []
    assert image["error"] == "not started: the run passed 1s (timeout_seconds)"


async def test_the_cli_runs_a_benchmark_against_the_running_router(
    harness: RouterHarness,
) -> None:
    harness.model("chat")
    await harness.start()
    assert harness.server is not None
    url = str(harness.server.make_url("")).rstrip("/")

    async def cli(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "router.cli",
            "benchmark",
            *args,
            "--url",
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("TENSOR_ROUTER_")},
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    code, out, err = await cli("chat", "--sections", "llm", "--iterations", "2", "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["type"] == "section" and record["iterations"] == 2
    assert record["sections"]["llm"]["status"] == "success"
    code, out, err = await cli("chat", "--sections", "runtime,llm")
    assert code == 0, err
    assert "runtime" in out and "model_load_ms" in out and "tokens_per_second" in out
    assert "success" in out
    code, out, err = await cli("chat", "--sections", "warp")
    assert code != 0 and "400" in err and "warp" in err


async def test_a_run_cut_by_the_router_stopping_is_stored_as_failed(
    harness: RouterHarness,
) -> None:
    harness.model("chat")
    harness.faults["llamacpp"] = "--ttft 30"
    client = await harness.start()
    assert harness.app is not None
    # Loaded first, so the section's lease is granted without a wait: by the time its
    # `running` event is read here, its request is with the backend.
    assert (await client.post("/router/v1/load", json={"model": "chat"})).status_code == 200
    async with harness.app[EVENTS].subscribe() as queue:
        post = asyncio.create_task(client.post(RUN, json={"model_id": "chat", "sections": ["llm"]}))
        while (await asyncio.wait_for(queue.get(), WAIT_S)).get("status") != "running":
            pass
        started = time.monotonic()
        await harness.close()
    assert time.monotonic() - started < WAIT_S  # the run was stopped, not waited for
    assert isinstance((await asyncio.gather(post, return_exceptions=True))[0], BaseException)
    with sqlite3.connect(harness.tmp / "data" / "router.sqlite") as db:
        rows = db.execute(
            "SELECT section, status, error, finished_at FROM benchmark_runs"
        ).fetchall()
    assert sorted(row[0] for row in rows) == ["llm", "run"]
    for _, status, error, finished_at in rows:
        assert status == "failed" and error == "the router stopped during the run"
        assert finished_at is not None


async def test_a_model_that_does_not_load_fails_its_sections_with_the_load_error(
    harness: RouterHarness,
) -> None:
    harness.model("broken")
    harness.faults_for_model["broken"] = "--exit-at-start 3"
    client = await harness.start()
    body = {"model_id": "broken", "sections": ["runtime", "llm"], "iterations": 2}
    record = (await client.post(RUN, json=body)).json()
    assert record["status"] == "failed" and record["error"] == "failed sections: runtime, llm"
    for name in ("runtime", "llm"):
        section = record["sections"][name]
        assert section["status"] == "failed" and section["metrics"] == []
        assert "exit" in section["error"] and "code 3" in section["error"], section["error"]
    # Each failed load is recorded like any other (load errors).
    errors = (await client.get("/router/v1/site/load-errors")).json()["errors"]
    assert len(errors) >= 4 and {e["model"] for e in errors} == {"broken"}
