"""Helpers for the real-backend tests that go through the router (test_router_*.py).

The router runs in-process on a real socket (tests/support/harness.py RouterHarness) with its program
sections pointing at the real llama-server, whisper-server and sd-server; the demo models are
generated once per session (the fixtures are in tests/real/conftest.py). A missing binary fails
(never skips): a green run must mean the real backends answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.base import built_backends_dir
from router.demo_models import write_kcpps, write_text_kcpps
from tests.support.harness import RouterHarness

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
