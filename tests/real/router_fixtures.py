"""Fixtures for the real-backend tests that go through the router (test_router_*.py).

The router runs in-process on a real socket (tests/support/harness.py RouterHarness) with its program
sections pointing at the real llama-server, whisper-server and sd-server; the demo models are
generated once per session. A missing binary fails (never skips): a green run must mean the
real backends answered. Import the fixtures by name into a test module.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.base import built_backends_dir
from router.demo_models import generate_text_models, write_kcpps, write_text_kcpps
from tests.support.harness import RouterHarness
from tests.support.proctree import live_descendants

LLAMA_ARGS = ["-t", "1"]  # one thread: two cores shared with other jobs
SDXS_CACHE = Path(
    os.environ.get("TENSOR_ROUTER_DEMO_CACHE", Path.home() / ".cache" / "tensor-router" / "demo")
)


def backend_binary(name: str, env_var: str) -> Path:
    """whisper-server / sd-server as `make backends` builds them, or $WHISPER_SERVER_BIN etc."""
    override = os.environ.get(env_var)
    path = Path(override) if override else built_backends_dir() / "bin" / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{name} not found at {path}: run make backends "
            f"(about 5 minutes on 2 cores), or set {env_var}",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def demo_text(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """chat-a.gguf, chat-b.gguf and embed.gguf, written once per session."""
    return generate_text_models(tmp_path_factory.mktemp("router-demo") / "models")


@pytest.fixture(scope="session")
def demo_whisper(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo whisper model and a 1 s test WAV, written once per session."""
    from router.demo_models.whisper_ggml import write_test_wav, write_whisper_ggml

    folder = tmp_path_factory.mktemp("router-whisper")
    return {
        "model": write_whisper_ggml(folder / "whisper-tiny.bin", seed=4),
        "wav": write_test_wav(folder / "tone.wav", seconds=1.0),
    }


@pytest.fixture(scope="session")
def demo_sdxs() -> Path:
    """The ~520 MB SDXS demo model, kept across runs in SDXS_CACHE (written atomically, once)."""
    from router.demo_models.sdxs import write_sdxs_gguf

    SDXS_CACHE.mkdir(parents=True, exist_ok=True)
    target = SDXS_CACHE / "sdxs.gguf"
    with (SDXS_CACHE / ".sdxs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be writing it right now
        if not target.is_file():
            started = time.monotonic()
            write_sdxs_gguf(target, seed=5)
            print(f"SDXS demo model written in {time.monotonic() - started:.1f} s")
    return target


@pytest.fixture
async def real_harness(tmp_path: Path, llama_server_bin: Path) -> AsyncIterator[RouterHarness]:
    """A RouterHarness whose llama section runs the real llama-server; nothing may survive it."""
    h = RouterHarness(tmp_path)
    h.programs["llamacpp"] = llama_server_bin
    h.extra_args["llamacpp"] = list(LLAMA_ARGS)
    try:
        yield h
    finally:
        await h.close()
        deadline = time.monotonic() + 3.0
        while (left := live_descendants()) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        assert left == [], f"a backend process outlived the router: {left}"


def write_demo_text_kcpps(h: RouterHarness, models: dict[str, Path]) -> None:
    """chat-a.kcpps, chat-b.kcpps and embed.kcpps in the harness's config folder."""
    write_text_kcpps(h.kcpps_dir, models)


def write_config(h: RouterHarness, model_id: str, **fields: Any) -> Path:
    """One .kcpps in the harness's config folder (Path values are written absolute)."""
    return write_kcpps(h.kcpps_dir / f"{model_id}.kcpps", extra=fields)


class EventLog:
    """Collects GET /router/v1/events in the background (the bus keeps no history)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.events: list[dict[str, Any]] = []
        self._client = client
        self._subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> EventLog:
        self._task = asyncio.create_task(self._read())
        await asyncio.wait_for(self._subscribed.wait(), 10)
        await asyncio.sleep(0.05)  # the handler subscribes right after sending its headers
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _read(self) -> None:
        async with self._client.stream("GET", "/router/v1/events", timeout=None) as response:
            assert response.status_code == 200, await response.aread()
            self._subscribed.set()
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    self.events.append(json.loads(line[5:]))

    async def wait_for(self, kind: str, within: float) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for event in self.events:
                if event.get("event") == kind:
                    return event
            await asyncio.sleep(0.02)
        raise AssertionError(f"no {kind!r} event within {within} s; saw {self.events}")
