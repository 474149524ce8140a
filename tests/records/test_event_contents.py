"""What the Overview page reads from /router/v1/events: load progress (phase text, percent,
elapsed), the usual load time on `loading`, a failed load's exit code, output tail and capture
attempt id, and the coalesced `activity` event (router/runtime/progress.py, activity.py,
router/records/load_times.py; docs/events.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from router.config import Settings
from router.records.load_times import LoadTimes
from router.runtime.activity import ActivityReporter
from router.runtime.progress import MAX_PHASE, LoadProgress, parse_line
from tests.support.harness import RouterHarness, chat

# --- pure parts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            b"load_tensors: loading model tensors 42%",
            ("load_tensors: loading model tensors 42%", 42.0),
        ),
        (b"\x1b[32mshards: 12.5% | 1/8\x1b[0m", ("shards: 12.5% | 1/8", 12.5)),
        (b"done 150% then 30 %", ("done 150% then 30 %", 30.0)),
        (b"reading /home/alice/models/m.gguf", ("reading m.gguf", None)),
        (b"   \t ", None),
        (b"\x1b[0m", None),
    ],
)
def test_parse_line(line: bytes, expected: tuple[str, float | None] | None) -> None:
    assert parse_line(line) == expected


def test_parse_line_caps_the_phase_text() -> None:
    parsed = parse_line(b"x" * 1000)
    assert parsed is not None and len(parsed[0]) == MAX_PHASE


async def test_progress_is_throttled_and_the_newest_line_wins() -> None:
    sent: list[dict[str, Any]] = []
    now = [100.0]
    progress = LoadProgress(
        lambda kind, **f: sent.append({"event": kind, **f}),
        {"model": "m"},
        clock=lambda: now[0],
        min_interval=0.05,
    )
    progress.output(b"step 10%")  # first line: at once
    progress.output(b"step 20%")
    progress.output(b"warming up")  # newest within the interval: sent at its end
    assert [e["phase"] for e in sent] == ["step 10%"]
    now[0] += 0.05
    await asyncio.sleep(0.2)
    assert [e["phase"] for e in sent] == ["step 10%", "warming up"]
    assert sent[1]["percent"] == 10.0  # a line without a number keeps the last percent
    assert sent[1]["elapsed_seconds"] == 0.05 and sent[1]["model"] == "m"
    now[0] += 0.05
    progress.output(b"late 90%")
    progress.close()
    await asyncio.sleep(0.1)
    assert len(sent) == 3  # sent at once (interval over); nothing after close
    progress.output(b"after close 95%")
    assert len(sent) == 3


def test_usual_load_time_is_the_median_of_recent_loads() -> None:
    times = LoadTimes(keep=3)
    assert times.enrich({"event": "loading", "model": "m"}) == {"usual_load_seconds": None}
    times.seed({"m": [100.0, 1.0, 2.0]})
    times.on_event({"event": "ready", "model": "m", "load_seconds": 3.0})  # 100 drops out
    assert times.usual("m") == 2.0
    assert times.enrich({"event": "ready", "model": "m"}) is None


async def test_activity_is_coalesced_and_sent_only_on_change() -> None:
    sent: list[dict[str, Any]] = []
    numbers = {"queued": {"text": 1}}
    reporter = ActivityReporter(lambda kind, **f: sent.append(f), lambda: dict(numbers), delay=0.01)
    for _ in range(100):
        reporter.poke()
    await asyncio.sleep(0.1)
    reporter.poke()  # same numbers: nothing new
    await asyncio.sleep(0.1)
    assert sent == [{"queued": {"text": 1}}]


# --- over HTTP, with fake backends -------------------------------------------------------


def settings(h: RouterHarness) -> Settings:
    data = h.settings().model_dump()
    data["analytics"] = {**data["analytics"], "load_capture_enabled": True}
    return Settings.model_validate(data)


async def collect(
    client: httpx.AsyncClient, action: Any, until: Any, limit: float = 30
) -> list[dict[str, Any]]:
    """Open the stream, run `action` once it is open, gather events up to `until` (an event
    name, or a test of the events so far)."""
    events: list[dict[str, Any]] = []
    async with client.stream("GET", "/router/v1/events") as response:
        lines = response.aiter_lines()
        task: asyncio.Task[Any] | None = None
        async with asyncio.timeout(limit):
            async for line in lines:
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                events.append(event)
                if event["event"] == "hello":
                    task = asyncio.create_task(action())
                if until(events) if callable(until) else event["event"] == until:
                    break
        assert task is not None
        await task
    return events


async def test_a_load_reports_phase_percent_elapsed_and_usual_time(
    harness: RouterHarness,
) -> None:
    harness.model("slow")
    harness.faults["llamacpp"] = "--startup-delay 1.2 --progress-every 0.15"
    client = await harness.start(settings(harness))

    async def load() -> None:
        response = await client.post("/router/v1/load", json={"model": "slow"}, timeout=60)
        assert response.status_code == 200, response.text

    first = await collect(client, load, "ready")
    loading = next(e for e in first if e["event"] == "loading")
    assert loading["model"] == "slow" and loading["usual_load_seconds"] is None
    progress = [e for e in first if e["event"] == "load_progress"]
    assert len(progress) >= 2
    tensors = [e for e in progress if "loading model tensors" in e["phase"]]
    assert len(tensors) >= 2, [e["phase"] for e in progress]
    percents = [e["percent"] for e in tensors]
    assert percents == sorted(percents) and percents[-1] > percents[0]
    elapsed = [e["elapsed_seconds"] for e in progress]
    assert elapsed == sorted(elapsed) and elapsed[-1] < 30
    ready = first[-1]
    assert ready["load_seconds"] > 1.0
    ids = [e["id"] for e in first if e["event"] != "hello"]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)

    async def reload() -> None:
        assert (await client.post("/router/v1/unload", json={})).status_code == 200
        await load()

    second = await collect(client, reload, "ready")
    # A new stream opens with the snapshot: hello, then the loaded runtime's state.
    assert [e["event"] for e in second[:2]] == ["hello", "state"]
    assert second[1]["runtime"] == ready["runtime"] and second[1]["state"] == "ready"
    again = next(e for e in second if e["event"] == "loading")
    assert again["usual_load_seconds"] == pytest.approx(ready["load_seconds"], abs=0.01)


async def test_a_failed_load_carries_exit_code_tail_and_attempt(harness: RouterHarness) -> None:
    harness.model("broken")
    harness.faults_for_model["broken"] = "--exit-at-start 3"
    client = await harness.start(settings(harness))

    async def load() -> None:
        response = await client.post("/router/v1/load", json={"model": "broken"}, timeout=60)
        assert response.status_code >= 500

    events = await collect(client, load, "failed")
    failed = events[-1]
    assert failed["model"] == "broken" and failed["exit_code"] == 3
    assert any("failed to load model" in line for line in failed["output_tail"])
    assert isinstance(failed["attempt_id"], str)
    capture = await client.get(f"/router/v1/site/load-captures/{failed['attempt_id']}")
    assert capture.status_code == 200 and capture.json()["exit_code"] == 3


async def test_requests_show_up_as_activity(harness: RouterHarness) -> None:
    harness.model("m1")
    client = await harness.start(settings(harness))

    async def request() -> None:
        response = await client.post("/v1/chat/completions", json=chat("m1"), timeout=60)
        assert response.status_code == 200

    def served(events: list[dict[str, Any]]) -> bool:
        kinds = [e["event"] for e in events]
        return (
            "ready" in kinds and kinds[-1] == "activity" and kinds.index("ready") < len(kinds) - 1
        )

    events = await collect(client, request, served)
    activity = events[-1]
    assert set(activity["queued"]) >= {"text", "image", "voice"}
    assert list(activity["in_flight"]) == [e["runtime"] for e in events if e["event"] == "ready"]
    assert all(n in (0, 1) for n in activity["in_flight"].values())
