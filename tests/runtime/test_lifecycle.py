"""Reliability matrix R1-R3, R5-R8, R13, R14: a backend's life as the router sees it.

A real router on a real socket (tests/support/harness.py), fake backends launched through the real
supervisor. Each test is named after its matrix row and ends with no backend process left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from backends.process import SupervisedProcess
from router.errors import LoadFailed
from router.runtime import loader
from tests.fakes.wrappers import fake_argv, write_chatty_wrapper
from tests.support.harness import RouterHarness, chat, free_port, wait_for, wait_http
from tests.support.signal_spy import spy_on_signals

# Shared 2-core box: timing bounds get this much slack on top of the ideal.
SLACK = 0.3


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _load(client: httpx.AsyncClient, model: str) -> httpx.Response:
    return await client.post("/router/v1/load", json={"model": model})


async def _unload_timed(client: httpx.AsyncClient, target: str = "text") -> float:
    started = time.monotonic()
    r = await client.post("/router/v1/unload", json={"target": target})
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    return elapsed


def _tree(pid: int) -> list[int]:
    return [p.pid for p in psutil.Process(pid).children(recursive=True)]


# ---- R1: stop escalation ---------------------------------------------------------------


async def test_r1_ignore_sigterm_is_killed_at_stop_grace(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    signals = spy_on_signals(monkeypatch)
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--ignore-sigterm"
    client = await harness.start(harness.settings(stop_grace=1))
    assert (await _load(client, "chat-a")).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    pid = runtime.process.pid
    elapsed = await _unload_timed(client)
    assert elapsed >= 1.0 - 0.05, f"unload took {elapsed:.2f}s with stop_grace 1s"
    assert runtime.process.returncode == -9, "the backend should have been SIGKILLed"
    # SIGKILL at the grace, on the router's own signals (tests/support/signal_spy.py).
    gap = signals.term_to_kill()
    assert gap is not None and 0.99 <= gap <= 1.1, signals.sent
    assert harness.runtimes.status_of("chat-a") == "unloaded"
    assert _gone(pid)
    status = (await client.get("/router/v1/status")).json()
    assert status["runtimes"] == []


async def test_r1_slow_sigterm_within_grace_is_not_killed_early(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--sigterm-delay 1.5"
    client = await harness.start(harness.settings(stop_grace=3))
    assert (await _load(client, "chat-a")).status_code == 200
    (runtime,) = harness.runtimes.runtimes()
    elapsed = await _unload_timed(client)
    # It waited for the exit 1.5 s after SIGTERM and ended there, not at the 3 s grace.
    assert 1.5 - 0.05 <= elapsed < 3.0, f"unload took {elapsed:.2f}s"
    assert runtime.process.returncode == 0, "exited by itself after SIGTERM, not killed"
    assert harness.runtimes.status_of("chat-a") == "unloaded"


# ---- R2 / R3: wrappers ----------------------------------------------------------------


@pytest.mark.parametrize("ignore_term", [False, True], ids=["exits-on-term", "ignores-term"])
@pytest.mark.parametrize("wrapper", ["fork", "setsid"])
async def test_r2_r3_wrapper_backend_unloads_whole_tree(
    harness: RouterHarness, wrapper: str, ignore_term: bool
) -> None:
    """R2: a bash wrapper whose background child holds stdout; R3: the child left the group
    with setsid(). Unload must stop the real server in both, within grace + 1 s, and must not
    wait on the pipes the grandchild holds."""
    grace = 1.5
    harness.model("chat-a")
    harness.wrap["llamacpp"] = wrapper
    if ignore_term:
        harness.faults["llamacpp"] = "--ignore-sigterm"
    client = await harness.start(harness.settings(stop_grace=grace))
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 200, r.text
    (runtime,) = harness.runtimes.runtimes()
    server_pid = int(r.headers["x-fake-pid"])
    assert server_pid != runtime.process.pid, "the server should be the wrapper's child"
    assert server_pid in _tree(runtime.process.pid)
    if wrapper == "setsid":
        assert os.getpgid(server_pid) != os.getpgid(runtime.process.pid), "left the group"
    elapsed = await _unload_timed(client)
    if ignore_term:
        assert grace - 0.05 <= elapsed <= grace + 1.0, f"unload took {elapsed:.2f}s"
    else:
        assert elapsed < grace, f"a TERMed server should stop before the grace ({elapsed:.2f}s)"
    assert _gone(server_pid), "the wrapper's child survived the unload"
    assert harness.runtimes.status_of("chat-a") == "unloaded"


# ---- R5: port taken / foreign process ---------------------------------------------------


async def test_r5_foreign_process_on_the_port_is_never_proxied_to(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A llama-server-shaped process the router did not start answers the readiness probe on
    the port the router picked. The identity check must refuse it: the load fails fast with a
    clear error (or succeeds on the router's own child), and no request reaches the foreigner."""
    port = free_port()
    record = tmp_path / "foreign.jsonl"
    foreign = subprocess.Popen(  # noqa: ASYNC220 (a quick fork-exec)
        fake_argv(
            "llamacpp",
            "-m",
            str(tmp_path / "foreign.gguf"),
            "--port",
            str(port),
            "--record-requests",
            str(record),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_http(f"http://127.0.0.1:{port}/health")
        monkeypatch.setattr(loader, "free_port", lambda: port)
        harness.model("chat-a")
        client = await harness.start(harness.settings(stop_grace=1))
        started = time.monotonic()
        r = await client.post("/v1/chat/completions", json=chat("chat-a"))
        elapsed = time.monotonic() - started
        if r.status_code == 200:  # allowed only if the answer came from the router's child
            assert int(r.headers["x-fake-pid"]) != foreign.pid
        else:
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert "foreign.gguf" in message or "in use" in message, message
            assert elapsed < 2.0, f"the load took {elapsed:.2f}s to fail"
        posts = [x for x in harness.records(record) if x["method"] == "POST"]
        assert posts == [], "a request was proxied to a process the router did not spawn"
        assert foreign.poll() is None, "the router must not kill a process it did not start"
    finally:
        foreign.terminate()
        foreign.wait(5)


def _count_spawns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every backend child the supervisor really starts, by pid."""
    started: list[int] = []
    real_start = SupervisedProcess.start

    async def start(self: SupervisedProcess) -> None:
        await real_start(self)
        started.append(self.pid or 0)

    monkeypatch.setattr(SupervisedProcess, "start", start)
    return started


async def test_r5_port_held_by_a_silent_listener_fails_fast(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chosen port is bound by something that accepts but never answers: no backend is
    started on it (a child could only fail to bind), so the load fails at a bind check."""
    spawned = _count_spawns(monkeypatch)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(16)
        port = squatter.getsockname()[1]
        monkeypatch.setattr(loader, "free_port", lambda: port)
        harness.model("chat-a")
        client = await harness.start(harness.settings(stop_grace=1))
        started = time.monotonic()
        r = await client.post("/v1/chat/completions", json=chat("chat-a"))
        elapsed = time.monotonic() - started
    assert r.status_code == 502, r.text
    assert f"port {port} is in use" in r.json()["error"]["message"]
    assert spawned == []
    assert elapsed < 1.0, f"the load took {elapsed:.2f}s to fail"  # R5: < 1 s
    assert harness.runtimes.status_of("chat-a") == "unloaded"


async def test_r5_port_taken_under_the_child_fails_at_its_exit_without_respawning(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A silent listener takes the port between the router's check and the child's bind: the
    child exits, the load fails at that exit, and it is not respawned on the held port."""
    spawned = _count_spawns(monkeypatch)
    squatter = socket.socket()
    port = free_port()
    real_in_use = loader.port_in_use

    def taken_right_after_the_check(candidate: int) -> bool:
        held = real_in_use(candidate)
        if not spawned and squatter.fileno() != -1 and not held:
            with contextlib.suppress(OSError):  # already listening: a later check
                squatter.bind(("127.0.0.1", candidate))
                squatter.listen(16)
        return held

    monkeypatch.setattr(loader, "free_port", lambda: port)
    monkeypatch.setattr(loader, "port_in_use", taken_right_after_the_check)
    with squatter:
        harness.model("chat-a")
        # Timeouts far above any start-up a loaded machine causes: a failure found by one of
        # them takes at least 60 s, one found at the child's exit well under half of that.
        client = await harness.start(
            harness.settings(stop_grace=1, load_timeout=120, no_progress_timeout=60)
        )
        started = time.monotonic()
        r = await client.post("/v1/chat/completions", json=chat("chat-a"))
        elapsed = time.monotonic() - started
    assert r.status_code == 502, r.text
    assert "exited" in r.json()["error"]["message"]
    assert len(spawned) == 1, spawned
    assert elapsed < 30, f"the load took {elapsed:.2f}s to fail: a timeout, not the exit"
    assert harness.runtimes.status_of("chat-a") == "unloaded"
    assert _gone(spawned[0])


# ---- R6 / R7: a backend that cannot start -------------------------------------------------


async def _collect_events(
    client: httpx.AsyncClient, into: list[dict], ready: asyncio.Event
) -> None:
    async with client.stream("GET", "/router/v1/events", timeout=None) as r:
        assert r.status_code == 200
        ready.set()
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                into.append(json.loads(line[5:]))


async def _with_events(client: httpx.AsyncClient) -> tuple[asyncio.Task[None], list[dict]]:
    events: list[dict] = []
    ready = asyncio.Event()
    task = asyncio.create_task(_collect_events(client, events, ready))
    await asyncio.wait_for(ready.wait(), 5)
    return task, events


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _load_errors(client: httpx.AsyncClient, needle: str, deadline: float = 3.0) -> list:
    """GET /router/v1/site/load-errors until an entry mentions `needle` (the store is async)."""
    end = time.monotonic() + deadline
    while True:
        r = await client.get("/router/v1/site/load-errors")
        assert r.status_code == 200, r.text
        found = [e for e in r.json()["errors"] if needle in json.dumps(e)]
        if found or time.monotonic() > end:
            return found
        await asyncio.sleep(0.05)


async def test_r6_exit_at_start_fails_fast(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--exit-at-start 1"
    # Timeouts far above any start-up a loaded machine causes (see the bound below).
    client = await harness.start(
        harness.settings(load_timeout=120, no_progress_timeout=60, stop_grace=1)
    )
    task, events = await _with_events(client)
    try:
        started = time.monotonic()
        r = await client.post("/v1/chat/completions", json=chat("chat-a"))
        elapsed = time.monotonic() - started
        assert r.status_code == 502, r.text
        message = r.json()["error"]["message"]
        assert "exited with code 1" in message, message
        assert "failed to load model" in message, "the backend's stderr line is missing"
        assert elapsed < 30, f"the failure took {elapsed:.2f}s: a timeout, not the exit"
        assert await wait_for(lambda: any(e.get("event") == "failed" for e in events))
        failed = next(e for e in events if e.get("event") == "failed")
        assert failed["model"] == "chat-a"
        assert "failed to load model" in failed["reason"]
        assert await _load_errors(client, "failed to load model"), "not in the load-errors log"
    finally:
        await _stop(task)
    assert harness.runtimes.status_of("chat-a") == "unloaded"
    # The failure is not sticky: the next request tries again (and fails the same way).
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 502
    assert harness.runtimes.spawn_count == 2


@pytest.mark.parametrize("problem", ["missing", "not-executable"])
async def test_r7_missing_binary_is_an_immediate_error(
    harness: RouterHarness, problem: str
) -> None:
    harness.model("chat-a")
    settings = harness.settings()
    bogus = harness.tmp / "bin" / "no-such-llama-server"
    if problem == "not-executable":
        bogus.write_text("#!/bin/sh\n")
    bad = settings.model_copy(
        update={"llama": settings.llama.model_copy(update={"binary_path": bogus})}
    )
    client = await harness.start(bad)
    task, events = await _with_events(client)
    try:
        started = time.monotonic()
        r = await client.post("/v1/chat/completions", json=chat("chat-a"))
        elapsed = time.monotonic() - started
        assert 500 <= r.status_code < 600, r.text
        message = r.json()["error"]["message"]
        assert "no-such-llama-server" in message and "llama.binary_path" in message, message
        assert str(harness.tmp) not in message, "error bodies carry no absolute paths"
        assert elapsed < 0.5
        assert await wait_for(lambda: any(e.get("event") == "failed" for e in events))
        assert await _load_errors(client, "no-such-llama-server"), "not in the load-errors log"
    finally:
        await _stop(task)
    assert harness.runtimes.status_of("chat-a") == "unloaded"


# ---- R8: slow starts -----------------------------------------------------------------------


async def test_r8_slow_start_with_progress_loads(harness: RouterHarness) -> None:
    """Output every 0.3 s keeps a 2 s start alive under a 1 s no-progress deadline. The
    wrapper prints from the first instant: the fake's own interpreter start is silent for
    longer than that deadline on a busy machine, which a native backend's start is not."""
    harness.model("chat-a")
    harness.programs["llamacpp"] = write_chatty_wrapper(
        harness.bin_dir, [str(harness.binary("llamacpp"))], every=0.3
    )
    harness.faults["llamacpp"] = "--startup-delay 2 --progress-every 0.3"
    client = await harness.start(harness.settings(no_progress_timeout=1, load_timeout=10))
    started = time.monotonic()
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 200, r.text
    assert time.monotonic() - started >= 2.0


async def test_r8_silent_start_fails_at_no_progress_deadline(
    harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--startup-delay 3"
    # When the loader gave up, and when the backend's last line (its banner) had arrived: the
    # banner follows the fake's interpreter start, seconds on a busy machine, so the request's
    # own time says nothing about the deadline.
    decided: list[tuple[float, float]] = []
    real_failed = loader._failed

    def failed(
        kind: type[LoadFailed], message: str, process: SupervisedProcess, code: int | None = None
    ) -> LoadFailed:
        decided.append((time.monotonic(), process.last_output_at))
        return real_failed(kind, message, process, code)

    monkeypatch.setattr(loader, "_failed", failed)
    client = await harness.start(
        harness.settings(no_progress_timeout=1, load_timeout=10, stop_grace=1)
    )
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 502, r.text
    assert "no_progress_timeout" in r.json()["error"]["message"]
    # One second of silence after the backend's last line, noticed within the probe cadence.
    ((at, last_line),) = decided
    silence = at - last_line
    assert 1.0 <= silence <= 1.0 + 0.8 + SLACK, f"failed after {silence:.2f}s of silence"
    assert harness.runtimes.status_of("chat-a") == "unloaded"


async def test_r8_slow_health_probe_still_loads(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--slow-health 1.2"
    client = await harness.start(harness.settings(no_progress_timeout=2, load_timeout=10))
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 200, r.text


# ---- R13 / R14: idle unload ----------------------------------------------------------------


async def test_r13_idle_unload_waits_for_the_lease(harness: RouterHarness) -> None:
    idle = 0.5
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--token-rate 5"
    # No wait announcements: a cold load past 2 s would start the stream while loading.
    client = await harness.start(harness.settings(idle_unload=idle, announce_wait_after=0))
    states: list[str] = []
    body = chat("chat-a", stream=True, max_tokens=10)  # ~2 s of streaming
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for _ in r.aiter_lines():
            states.append(harness.runtimes.status_of("chat-a"))
        released = time.monotonic()
    assert len(states) > 10 and set(states) == {"ready"}, "unloaded while the lease was held"
    assert await wait_for(lambda: harness.runtimes.status_of("chat-a") != "ready", idle + 2)
    unloaded_after = time.monotonic() - released
    assert unloaded_after >= idle - 0.05, f"unloaded {unloaded_after:.2f}s after the release"
    assert await wait_for(lambda: harness.runtimes.status_of("chat-a") == "unloaded", 3)


async def test_r13_idle_unload_counts_from_last_release(harness: RouterHarness) -> None:
    idle = 0.8
    harness.model("chat-a")
    client = await harness.start(harness.settings(idle_unload=idle))
    for _ in range(4):  # a request every 0.4 s keeps it loaded well past one idle period
        assert (await client.post("/v1/chat/completions", json=chat("chat-a"))).status_code == 200
        await asyncio.sleep(idle / 2)
        assert harness.runtimes.status_of("chat-a") == "ready"
    assert harness.runtimes.spawn_count == 1


async def test_r14_idle_unload_never_interrupts_a_slow_load(harness: RouterHarness) -> None:
    harness.model("chat-a")
    harness.faults["llamacpp"] = "--startup-delay 1.5 --progress-every 0.2"
    client = await harness.start(harness.settings(idle_unload=0.3, no_progress_timeout=2))
    started = time.monotonic()
    r = await client.post("/v1/chat/completions", json=chat("chat-a"))
    assert r.status_code == 200, r.text
    assert time.monotonic() - started >= 1.5
    assert harness.runtimes.spawn_count == 1
    # ...and it still unloads once idle.
    assert await wait_for(lambda: harness.runtimes.status_of("chat-a") == "unloaded", 3)
