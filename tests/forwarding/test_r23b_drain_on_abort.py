"""R23b: a backend that crashes when a generation is cancelled, configured `drain_on_abort`.

The fake backend's `--cancel-crashes` aborts the whole process when a request it is answering
is cancelled (llama-swap#980: an engine whose batch dies with one aborted sequence). With
`drain_on_abort` on its program section, a client that leaves is not passed on as a cancel:
the router reads the answer to its end, so the backend and every other stream on it live on.
The drain is bounded: past `abort_drain_bytes` or `abort_drain_timeout` the connection is
closed after all (and this backend then crashes, as it would have at once without the drain).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.appkeys import PROXY
from router.config import Settings
from tests.support.harness import RouterHarness, chat, stream_chat, wait_for

CHAT = "/v1/chat/completions"


def _drained(harness: RouterHarness, **program: Any) -> Settings:
    settings = harness.settings()
    llama = settings.llama.model_copy(update={"drain_on_abort": True, **program})
    return settings.model_copy(update={"llama": llama})


def _disconnects(harness: RouterHarness, record: Path) -> list[dict[str, Any]]:
    return [x for x in harness.records(record) if x.get("disconnected")]


async def _abort_after(client: httpx.AsyncClient, events: int, max_tokens: int) -> None:
    """Stream a chat and leave after `events` tokens (0: during prefill, before any byte)."""
    body = chat("chat-a", stream=True, max_tokens=max_tokens)
    if events == 0:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(CHAT, json=body, timeout=0.5)
        return
    async with client.stream("POST", CHAT, json=body) as r:
        seen = 0
        async for line in r.aiter_lines():
            if '"content": "tok' in line:
                seen += 1
                if seen == events:
                    break


@pytest.mark.parametrize("left_after", [3, 0], ids=["mid-stream", "during-prefill"])
async def test_r23b_abort_is_drained_and_other_streams_live_on(
    harness: RouterHarness, left_after: int
) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    ttft = "--ttft 1" if left_after == 0 else ""
    harness.faults["llamacpp"] = (
        f"--cancel-crashes --token-rate 20 --parallel 4 {ttft} --record-requests {record}"
    )
    client = await harness.start(_drained(harness))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    other = asyncio.create_task(stream_chat(client, chat("chat-a", stream=True, max_tokens=30)))
    await _abort_after(client, left_after, max_tokens=20)
    status, events = await other
    # The other client's stream ran to its end on the same process...
    assert status == 200
    assert events[-1].data == "[DONE]", events[-3:]
    assert len([e for e in events if '"tok' in e.data]) == 30
    # ...the aborted answer was read to its end, never cancelled...
    assert await wait_for(lambda: harness.app is not None and harness.app[PROXY].draining == 0, 5)
    assert _disconnects(harness, record) == []
    assert runtime.process is not None and runtime.process.returncode is None
    # ...and the backend serves on without a relaunch.
    r = await client.post(CHAT, json=chat("chat-a", max_tokens=2))
    assert r.status_code == 200, r.text
    assert harness.runtimes.spawn_count == 1


@pytest.mark.parametrize(
    "bound",
    [{"abort_drain_bytes": 64}, {"abort_drain_timeout": 0.5}],
    ids=["bytes", "time"],
)
async def test_r23b_the_drain_is_bounded(harness: RouterHarness, bound: dict[str, Any]) -> None:
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--cancel-crashes --token-rate 20 --record-requests {record}"
    client = await harness.start(_drained(harness, **bound))
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    assert runtime.process is not None
    # 400 tokens at 20/s: a drain without its bound would hold the backend for 20 s.
    await _abort_after(client, 3, max_tokens=400)
    left = time.monotonic()
    assert await wait_for(lambda: harness.app is not None and harness.app[PROXY].draining == 0, 8)
    ended = time.monotonic() - left
    assert ended < 8, f"the drain ran {ended:.1f}s past its bound"
    # Past the bound the connection was closed: this backend sees the cancel and crashes.
    assert await wait_for(lambda: bool(_disconnects(harness, record)), 5)
    assert await wait_for(
        lambda: runtime.process is not None and runtime.process.returncode is not None, 5
    )


async def test_r23b_without_drain_on_abort_the_cancel_reaches_the_backend(
    harness: RouterHarness,
) -> None:
    """The control: the same abort on a program not configured so crashes this backend."""
    record = harness.tmp / "record.jsonl"
    harness.model("chat-a")
    harness.faults["llamacpp"] = f"--cancel-crashes --token-rate 20 --record-requests {record}"
    client = await harness.start()
    assert (await client.post("/router/v1/load", json={"model": "chat-a"})).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    await _abort_after(client, 3, max_tokens=20)
    assert await wait_for(lambda: bool(_disconnects(harness, record)), 5)
    assert await wait_for(
        lambda: runtime.process is not None and runtime.process.returncode is not None, 5
    )
