"""The real llama-server through the router, driven by the official `openai` client.

Random weights produce noise, so replies are checked for shape, and for identity by comparing
with each model's own greedy reply (temperature 0, fixed seed, token log-probabilities) when
asked alone. The client never retries (max_retries=0), so no error is hidden by a retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import psutil
import pytest
import yaml
from openai import AsyncOpenAI

from router.demo_models import write_text_kcpps
from tests.real.router_fixtures import LLAMA_ARGS, EventLog, write_config, write_demo_text_kcpps
from tests.support.harness import RouterHarness, free_port, iter_sse
from tests.support.proctree import reap_zombie_children

# The shared fixtures, used by name.

pytestmark = [pytest.mark.real, pytest.mark.timeout(90)]

GEN = {"max_tokens": 8, "temperature": 0, "seed": 42}
MESSAGES = [{"role": "user", "content": "Hello world, tell me a story."}]


def openai_client(h: RouterHarness, **kwargs: object) -> AsyncOpenAI:
    assert h.server is not None
    base = str(h.server.make_url("/v1"))
    return AsyncOpenAI(base_url=base, api_key="unused-on-loopback", max_retries=0, **kwargs)


async def started(h: RouterHarness, demo: dict[str, Path], **runtime: object) -> AsyncOpenAI:
    write_demo_text_kcpps(h, demo)
    await h.start(h.settings(**runtime))
    return openai_client(h, timeout=60)


async def test_openai_chat(real_harness: RouterHarness, demo_text: dict[str, Path]) -> None:
    client = await started(real_harness, demo_text)
    reply = await client.chat.completions.create(model="chat-a", messages=MESSAGES, **GEN)
    assert reply.model == "chat-a"
    assert reply.choices[0].message.role == "assistant"
    assert isinstance(reply.choices[0].message.content, str)
    assert reply.choices[0].finish_reason in {"length", "stop"}
    assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 8
    assert real_harness.runtimes.status_of("chat-a") == "ready"


async def test_openai_streamed_chat(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await started(real_harness, demo_text)
    whole = await client.chat.completions.create(model="chat-b", messages=MESSAGES, **GEN)
    stream = await client.chat.completions.create(
        model="chat-b", messages=MESSAGES, stream=True, **GEN
    )
    pieces, finish, models = [], None, set()
    async for chunk in stream:
        models.add(chunk.model)
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert models == {"chat-b"}
    assert finish in {"length", "stop"}
    # The same greedy decode, streamed: the events reached the client complete and in order.
    assert "".join(pieces) == whole.choices[0].message.content


async def test_openai_completions(real_harness: RouterHarness, demo_text: dict[str, Path]) -> None:
    client = await started(real_harness, demo_text)
    reply = await client.completions.create(model="chat-a", prompt="Once upon a time", **GEN)
    assert reply.model == "chat-a"
    assert len(reply.choices) == 1 and isinstance(reply.choices[0].text, str)
    assert reply.choices[0].finish_reason in {"length", "stop"}
    assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 8


# Without encoding_format the openai client asks for base64 and decodes it itself.
@pytest.mark.parametrize("fmt", [{"encoding_format": "float"}, {}], ids=["float", "base64"])
async def test_openai_embeddings(
    real_harness: RouterHarness, demo_text: dict[str, Path], fmt: dict[str, str]
) -> None:
    client = await started(real_harness, demo_text)
    reply = await client.embeddings.create(
        model="embed", input=["hello world", "a second text"], **fmt
    )
    assert reply.model == "embed"
    assert [item.index for item in reply.data] == [0, 1]
    vectors = [item.embedding for item in reply.data]  # the demo bert model is 32 wide
    assert all(len(v) == 32 and all(math.isfinite(x) for x in v) for v in vectors)
    assert vectors[0] != vectors[1]
    assert real_harness.runtimes.status_of("embed") == "ready"


# Issue 36: the router cuts `dimensions` for llama-server (which ignores it); base64 answers,
# the openai client's default, were passed whole (every value, not the 8 asked for).
@pytest.mark.parametrize("fmt", [{"encoding_format": "float"}, {}], ids=["float", "base64"])
async def test_openai_embeddings_dimensions(
    real_harness: RouterHarness, demo_text: dict[str, Path], fmt: dict[str, str]
) -> None:
    client = await started(real_harness, demo_text)
    full = await client.embeddings.create(model="embed", input="hello world", **fmt)
    cut = await client.embeddings.create(model="embed", input="hello world", dimensions=8, **fmt)
    head, vec = full.data[0].embedding[:8], cut.data[0].embedding
    assert len(full.data[0].embedding) == 32 and len(vec) == 8
    assert math.isclose(math.sqrt(sum(x * x for x in vec)), 1.0, rel_tol=1e-5)
    norm = math.sqrt(sum(x * x for x in head))
    assert all(
        math.isclose(c, h / norm, rel_tol=1e-4, abs_tol=1e-6)
        for c, h in zip(vec, head, strict=True)
    )


# Random-weight chat models echo the template's last token ("\n") whatever they are asked, so
# the greedy text alone cannot tell chat-a from chat-b; the log-probabilities of the chosen
# tokens can (they differ by ~0.2 between the models, and by ~1e-4 when llama-server batches
# concurrent requests in its slots).
LOGPROB_TOLERANCE = 0.01


@dataclass(frozen=True)
class Fingerprint:
    model: str  # the echoed name
    text: str
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]

    def same_backend(self, other: Fingerprint) -> bool:
        return (
            self.text == other.text
            and self.tokens == other.tokens
            and all(
                abs(a - b) <= LOGPROB_TOLERANCE
                for a, b in zip(self.logprobs, other.logprobs, strict=True)
            )
        )


async def _greedy(client: AsyncOpenAI, model: str) -> Fingerprint:
    reply = await client.chat.completions.create(
        model=model, messages=MESSAGES, logprobs=True, **GEN
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    return Fingerprint(
        reply.model,
        choice.message.content or "",
        tuple(t.token for t in choice.logprobs.content),
        tuple(t.logprob for t in choice.logprobs.content),
    )


async def test_twenty_concurrent_requests_swap_between_two_models(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await started(real_harness, demo_text)
    runtimes = real_harness.runtimes
    # Each model's greedy reply, asked alone: the fingerprint of the backend that answers.
    reference = {model: await _greedy(client, model) for model in ("chat-a", "chat-b")}
    assert not reference["chat-a"].same_backend(reference["chat-b"]), "the models must differ"
    spawns_before = runtimes.spawn_count
    assert spawns_before == 2

    models = ["chat-a", "chat-b"] * 10
    started_at = time.monotonic()
    replies = await asyncio.gather(*(_greedy(client, model) for model in models))
    elapsed = time.monotonic() - started_at
    swaps = runtimes.spawn_count - spawns_before
    print(f"20 concurrent requests in {elapsed:.2f} s with {swaps} spawns")
    for model, reply in zip(models, replies, strict=True):
        assert reply.model == model
        assert reply.same_backend(reference[model]), f"{model} answered by another backend"
    # chat-b was loaded when they arrived: it had to make way for chat-a, then come back for
    # the chat-b requests that queued meanwhile.
    assert swaps >= 2
    assert len(runtimes.runtimes()) == 1  # one text lane, one runtime


async def test_swap_makes_progress_when_loads_outlast_the_batch_window(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    """Regression: a runtime that became ready after the other model's oldest waiter had
    waited max_batch_wait was stopped before serving the waiters it was loaded for, so the
    lane swapped back and forth forever (fixed in router/runtime/manager.py `_load`)."""
    # Each llama-server load takes 50-200 ms here, longer than this batch window; the same
    # happens with the default 30 s window and models that take more than 30 s to load.
    client = await started(real_harness, demo_text, max_batch_wait=0.02)
    await _greedy(client, "chat-b")
    short = openai_client(real_harness, timeout=10)
    models = ["chat-a", "chat-b"] * 3
    try:
        replies = await asyncio.gather(*(_greedy(short, m) for m in models))
    finally:
        print(f"{real_harness.runtimes.spawn_count} spawns")
    assert [r.model for r in replies] == models
    assert real_harness.runtimes.spawn_count <= 1 + len(models)  # no swap without a grant


async def test_backend_killed_mid_stream_ends_the_stream_with_an_error(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    client = await started(real_harness, demo_text)
    runtimes = real_harness.runtimes
    # Long enough that the kill lands mid-generation; the kill ends it at once.
    long = {"max_tokens": 1500, "temperature": 0, "extra_body": {"ignore_eos": True}}
    stream = await client.chat.completions.create(
        model="chat-a", messages=MESSAGES, stream=True, **long
    )
    chunks = 0
    with pytest.raises(openai.APIError) as caught:
        async for _chunk in stream:
            chunks += 1
            if chunks == 1:
                [pid] = real_harness.backend_pids()
                assert psutil.Process(pid).name() == "llama-server"
                os.kill(pid, signal.SIGKILL)
    # Not a silent success: the router's terminal `event: error` record became an exception.
    assert "backend" in caught.value.message, caught.value.message
    assert chunks < 1500
    reply = await client.chat.completions.create(model="chat-a", messages=MESSAGES, **GEN)
    assert reply.model == "chat-a" and reply.choices[0].finish_reason in {"length", "stop"}
    assert runtimes.spawn_count == 2  # relaunched by the next request
    assert real_harness.backend_pids() != [pid]


async def test_backend_killed_mid_stream_raw_sse_ends_with_error_event(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    await started(real_harness, demo_text)
    assert real_harness.client is not None
    body = {
        "model": "chat-b",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 1500,
        "temperature": 0,
        "ignore_eos": True,
    }
    async with real_harness.client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("data:"):
                break  # the first event: the backend is generating
        [pid] = real_harness.backend_pids()
        os.kill(pid, signal.SIGKILL)
        events = [event async for event in iter_sse(lines)]
    assert events, "the stream ended without a terminal record"
    assert events[-1].event == "error", events[-3:]
    assert json.loads(events[-1].data)["error"]["type"] == "upstream_error"
    assert all(e.data != "[DONE]" for e in events)
    retry = await real_harness.client.post(
        "/v1/chat/completions", json={**body, "stream": False, "max_tokens": 8}
    )
    assert retry.status_code == 200, retry.text
    assert real_harness.runtimes.spawn_count == 2


async def test_request_right_after_a_backend_death_relaunches_it(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    """The request that follows a crash at once, before the router has seen the exit, must
    not fail on a pooled connection to the dead backend (it did, ~40% of the time: 502
    "Connection reset by peer"; fixed in router/api/inference/serving.py `_backend_died`)."""
    client = await started(real_harness, demo_text)
    for round_ in range(4):
        await client.chat.completions.create(model="chat-a", messages=MESSAGES, **GEN)
        [pid] = real_harness.backend_pids()
        os.kill(pid, signal.SIGKILL)
        reply = await client.chat.completions.create(model="chat-a", messages=MESSAGES, **GEN)
        assert reply.model == "chat-a", f"round {round_}"
        assert real_harness.backend_pids() != [pid]
    assert real_harness.runtimes.spawn_count == 5


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_killed_router_leaves_no_llama_server(
    tmp_path: Path, demo_text: dict[str, Path], llama_server_bin: Path
) -> None:
    """R4: `kill -9` of a real `tensor-router start` takes its llama-server down within 2 s."""
    write_text_kcpps(tmp_path / "kcpps", demo_text)
    port = free_port()
    config = {
        "security": {"profile": "trusted_lan"},
        "server": {"bind": f"127.0.0.1:{port}"},
        "models": {"config_dir": "kcpps"},
        "analytics": {"database_path": "data/router.sqlite"},
        "llama": {"binary_path": str(llama_server_bin), "extra_args": LLAMA_ARGS},
        "runtime": {"load_timeout": "20s", "stop_grace": "3s"},
    }
    (tmp_path / "router.yaml").write_text(yaml.safe_dump(config))
    program = Path(sys.executable).with_name("tensor-router")
    log = (tmp_path / "router.log").open("wb")
    router = subprocess.Popen(
        [str(program), "start", "--config", str(tmp_path / "router.yaml")],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    survivors: list[psutil.Process] = []
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as http:
            _wait_health(http, router, tmp_path / "router.log")
            loaded = http.post("/router/v1/load", json={"model": "chat-a"})
            assert loaded.status_code == 200, loaded.text
            [runtime] = http.get("/router/v1/status").json()["runtimes"]
        backend = psutil.Process(runtime["pid"])
        assert backend.name() == "llama-server" and backend.ppid() == router.pid
        survivors = [backend, *psutil.Process(router.pid).children(recursive=True)]

        router.kill()
        router.wait(timeout=5)
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < 2.0 and not _gone(backend.pid):
            time.sleep(0.02)
        print(f"llama-server gone {time.monotonic() - killed_at:.3f} s after the router")
        assert _gone(backend.pid), "llama-server outlived the killed router by 2 s"
        # The death-pipe watchdog (and anything else the router started) goes too.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not all(_gone(p.pid) for p in survivors):
            time.sleep(0.05)
        assert [p.pid for p in survivors if not _gone(p.pid)] == []
    finally:
        if router.poll() is None:
            router.kill()
            router.wait(timeout=5)
        for proc in survivors:  # never leave one behind, even when the test failed
            with contextlib.suppress(psutil.Error):
                proc.kill()
        reap_zombie_children()  # orphans re-parented to a subreaper test process
        log.close()


def _wait_health(http: httpx.Client, router: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert router.poll() is None, f"the router exited:\n{log.read_text()[-2000:]}"
        with contextlib.suppress(httpx.TransportError):
            if http.get("/health").status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError(f"the router did not come up:\n{log.read_text()[-2000:]}")


async def test_corrupt_gguf_fails_at_once_with_llama_servers_own_error(
    real_harness: RouterHarness, demo_text: dict[str, Path]
) -> None:
    corrupt = real_harness.models_dir / "broken.gguf"
    corrupt.write_bytes(random.Random(7).randbytes(64 * 1024))  # no GGUF magic, no header
    write_config(real_harness, "broken", model_param=corrupt)
    # Far above any start-up a loaded machine causes: a failure found by the timeout takes at
    # least 60 s, one found at llama-server's exit well under half of that.
    load_timeout = 60.0
    await real_harness.start(real_harness.settings(load_timeout=load_timeout))
    client = openai_client(real_harness, timeout=load_timeout + 10)
    assert real_harness.client is not None
    async with EventLog(real_harness.client) as events:
        started_at = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="broken", messages=MESSAGES, **GEN)
        elapsed = time.monotonic() - started_at
        failed = await events.wait_for("failed", within=5)
    print(f"load failed after {elapsed:.3f} s: {caught.value.message}")
    assert elapsed < load_timeout / 2, (
        f"the load took {elapsed:.2f}s to fail: it must fail when llama-server exits, not at "
        "the timeout"
    )
    message = caught.value.message
    # llama-server's own words (its output tail), not only the router's.
    assert "invalid magic characters" in message, message
    assert "failed to load model" in message, message
    assert str(corrupt.parent) not in message  # no absolute paths in errors
    assert caught.value.status_code >= 500
    assert (failed["model"], failed["family"], failed["lanes"]) == ("broken", "llamacpp", ["text"])
    assert "invalid magic characters" in failed["reason"], failed["reason"]
    assert real_harness.runtimes.runtimes() == []  # no sticky failed state
