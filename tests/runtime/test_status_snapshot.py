"""Issue 32: GET /router/v1/status answers from the manager's snapshot of one moment; it never
waits for the memory report (an estimate's header read) while a swap is under way."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from router.domain import Lane
from router.runtime import holdings
from tests.support.harness import RouterHarness, chat, wait_for

CHAT = "/v1/chat/completions"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The estimate's header read ends only when the test sets the event (or at teardown)."""
    event = threading.Event()
    real = holdings.estimate_config

    def slow_estimate(*args: Any, **kwargs: Any) -> Any:
        event.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(holdings, "estimate_config", slow_estimate)
    yield event
    event.set()


async def _queued_behind_a_slow_load(harness: RouterHarness) -> tuple[Any, asyncio.Task[Any]]:
    """A started router whose chat-a load stays under way, one request queued for it."""
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--startup-delay 30"  # the load stays under way
    client = await harness.start(harness.settings())
    waiting = asyncio.create_task(client.post(CHAT, json=chat("chat-a", max_tokens=1)))
    assert await wait_for(lambda: harness.runtimes.queue_length(Lane.TEXT) == 1, 20)
    return client, waiting


async def test_status_answers_while_the_estimate_and_a_slow_load_are_held(
    harness: RouterHarness, held: threading.Event
) -> None:
    client, waiting = await _queued_behind_a_slow_load(harness)
    # Without the snapshot, this awaited the held estimate and timed out.
    answer = await asyncio.wait_for(client.get("/router/v1/status"), 10)
    status = answer.json()
    assert [(r["model"], r["state"], r["memory"]) for r in status["runtimes"]] == [
        ("chat-a", "loading", None)  # its estimate is not known yet: no figure shown
    ]
    assert [r["model"] for r in status["queue"]["text"]] == ["chat-a"]
    assert status["queued"]["text"] == 1  # the same moment as the queue rows
    held.set()
    assert await wait_for(lambda: harness.runtimes.ledger.holdings.cached(_spec(harness)), 20)
    status = (await client.get("/router/v1/status")).json()
    memory = status["runtimes"][0]["memory"]
    assert memory is not None and memory["source"] == "estimate" and memory["bytes"] > 0
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


@pytest.mark.parametrize("path", ["/metrics", "/api/ps"])
async def test_metrics_and_ollama_ps_answer_while_the_estimate_and_a_load_are_held(
    harness: RouterHarness, held: threading.Event, path: str
) -> None:
    """/metrics and Ollama's /api/ps read the same snapshot: neither waits for the estimate."""
    client, waiting = await _queued_behind_a_slow_load(harness)
    # Without the snapshot, these awaited the held estimate and timed out.
    answer = await asyncio.wait_for(client.get(path), 10)
    assert answer.status_code == 200
    if path == "/metrics":
        assert "tensor_router_memory_used_bytes" in answer.text
        assert "tensor_router_runtime_memory_bytes{" not in answer.text  # not known yet
    else:
        assert answer.json() == {"models": []}  # loading: not listed by Ollama's ps
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


def _spec(harness: RouterHarness) -> Any:
    return harness.runtimes.runtimes()[0].spec
