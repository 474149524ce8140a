"""Helpers for the site route tests: a harness whose settings confine model files to its
models folder, a hasher that counts (and may hold) the files it really reads, and the
catalog events a config-file change sends."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from router.appkeys import SITE_FILES
from router.config import Settings
from router.records.events import Event
from router.site import Digest, FileStat, digest_file
from tests.support.harness import RouterHarness


def site_settings(h: RouterHarness, **limits: Any) -> Settings:
    base = h.settings()
    models = base.models.model_copy(update={"file_roots": (h.models_dir,)})
    update: dict[str, Any] = {"models": models}
    if limits:
        update["limits"] = base.limits.model_copy(update=limits)
    return base.model_copy(update=update)


class CountingHasher:
    """Wraps the real hasher; `reads` lists every resolved path it was asked to read."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.gate: threading.Event | None = None  # when set up, each read waits for it
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, stat: FileStat) -> Digest | None:
        with self._lock:
            self.reads.append(stat.real)
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        return digest_file(stat)


def count_reads(h: RouterHarness) -> CountingHasher:
    assert h.app is not None
    hasher = CountingHasher()
    h.app[SITE_FILES].cache.hasher = hasher
    return hasher


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


EVENT_WAIT = 20.0  # two catalog poll periods plus a loaded CI box


def client(h: RouterHarness) -> httpx.AsyncClient:
    assert h.client is not None
    return h.client


async def catalog_event(queue: asyncio.Queue[Event], want: Callable[[Event], bool]) -> Event:
    """The first `catalog` event `want` accepts (an editor's half-written file may come first)."""
    async with asyncio.timeout(EVENT_WAIT):
        while True:
            event = await queue.get()
            if event["event"] == "catalog" and want(event):
                return event
