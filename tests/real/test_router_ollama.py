"""The real llama-server behind the router's Ollama surface, driven by the official `ollama`
client and raw NDJSON: the translated path is the router's one forwarding path."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import ollama
import psutil
import pytest

from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness

pytestmark = [pytest.mark.real, pytest.mark.timeout(90)]

GREEDY = {"num_predict": 8, "temperature": 0, "seed": 42}
MESSAGES = [{"role": "user", "content": "Hello world, tell me a story."}]


async def _started(h: RouterHarness, demo: dict[str, Path]) -> ollama.AsyncClient:
    write_demo_text_kcpps(h, demo)
    await h.start()
    assert h.server is not None
    return ollama.AsyncClient(host=str(h.server.make_url("")).rstrip("/"), timeout=60)


async def test_ollama_streamed_chat_is_the_whole_answer_in_pieces(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await _started(real_harness, demo_text)
    whole = await client.chat(model="chat-a", messages=MESSAGES, options=GREEDY, stream=False)
    assert whole.model == "chat-a" and whole.done and whole.eval_count
    parts = [
        part
        async for part in await client.chat(
            model="chat-a", messages=MESSAGES, options=GREEDY, stream=True
        )
    ]
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count


async def test_ollama_stream_of_a_killed_backend_ends_with_one_error_record(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    await _started(real_harness, demo_text)
    assert real_harness.client is not None
    body = {
        "model": "chat-b",
        "messages": MESSAGES,
        "stream": True,
        "options": {"num_predict": 1500, "temperature": 0},
    }
    async with real_harness.client.stream("POST", "/api/chat", json=body) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        first = json.loads(await anext(lines))
        assert first["done"] is False  # the backend is generating
        [pid] = real_harness.backend_pids()
        assert psutil.Process(pid).name() == "llama-server"
        os.kill(pid, signal.SIGKILL)
        rest = [json.loads(line) async for line in lines if line.strip()]
    assert rest and set(rest[-1]) == {"error"}, rest[-3:]
    assert not any(r.get("done") for r in rest) and sum("error" in r for r in rest) == 1
    retry = await real_harness.client.post(
        "/api/chat", json={**body, "stream": False, "options": GREEDY}
    )
    assert retry.status_code == 200, retry.text
    assert real_harness.runtimes.spawn_count == 2
