"""Ollama's unload, keep_alive and model metadata against the real llama-server (issue 23):
Open WebUI's Unload button (an empty /api/generate with keep_alive 0) stops the process and
never starts one; /api/ps and /api/show describe the demo GGUFs from their headers."""

from __future__ import annotations

from pathlib import Path

import ollama
import psutil
import pytest

from tests.real.router_fixtures import write_demo_text_kcpps
from tests.support.harness import RouterHarness, wait_for

pytestmark = [pytest.mark.real, pytest.mark.timeout(90)]


async def _started(h: RouterHarness, demo: dict[str, Path]) -> ollama.AsyncClient:
    write_demo_text_kcpps(h, demo)
    await h.start()
    assert h.server is not None
    return ollama.AsyncClient(host=str(h.server.make_url("")).rstrip("/"), timeout=60)


async def test_unload_button_stops_llama_server_and_never_starts_one(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await _started(real_harness, demo_text)
    unloaded = await client.generate(model="chat-a", keep_alive=0)
    assert unloaded.done_reason == "unload" and real_harness.runtimes.spawn_count == 0
    loaded = await client.generate(model="chat-a")
    assert loaded.done_reason == "load"
    [pid] = real_harness.backend_pids()
    (running,) = (await client.ps()).models
    assert running.model == "chat-a" and running.context_length == 2048
    assert running.details is not None and running.details.family == "llama"
    assert running.details.quantization_level == "F32" and running.details.parameter_size
    assert running.expires_at is not None and running.expires_at.year > 2200
    unloaded = await client.generate(model="chat-a", keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert (await client.ps()).models == [] and real_harness.runtimes.spawn_count == 1


async def test_keep_alive_zero_chat_answers_then_unloads(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await _started(real_harness, demo_text)
    reply = await client.chat(
        model="chat-b",
        messages=[{"role": "user", "content": "Hello world"}],
        options={"num_predict": 8, "temperature": 0},
        keep_alive=0,
    )
    assert reply.done and reply.eval_count
    assert await wait_for(lambda: real_harness.runtimes.status_of("chat-b") == "unloaded", 10)
    shown = await client.show("embed")
    assert shown.capabilities == ["embedding"]
    assert (shown.modelinfo or {})["general.architecture"] == "bert"
    assert (shown.modelinfo or {})["bert.context_length"] == 512
