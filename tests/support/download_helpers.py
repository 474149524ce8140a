"""Shared pieces of the download tests: settings, job polling (the `hub` fixture is in
tests/downloads/conftest.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from router.config import DownloadsSection, Settings
from tests.fakes.fake_hub import FakeHub
from tests.support.harness import RouterHarness

BASE = "/router/v1/site/download"
TERMINAL = ("completed", "failed", "cancelled")


def download_settings(h: RouterHarness, hub: FakeHub, **fields: Any) -> Settings:
    section = DownloadsSection(
        endpoint=hub.endpoint, dir=h.tmp / "library", free_space_reserve_gb=0, **fields
    )
    return h.settings().model_copy(update={"downloads": section})


async def job_state(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    r = await client.get(f"{BASE}/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


async def wait_job(
    client: httpx.AsyncClient,
    job_id: str,
    states: tuple[str, ...] = TERMINAL,
    deadline: float = 30.0,
) -> dict[str, Any]:
    end = time.monotonic() + deadline
    while True:
        job = await job_state(client, job_id)
        if job["state"] in states or time.monotonic() > end:
            assert job["state"] in states, job
            return job
        await asyncio.sleep(0.05)


async def wait_bytes(
    client: httpx.AsyncClient, job_id: str, at_least: int, deadline: float = 30.0
) -> dict[str, Any]:
    end = time.monotonic() + deadline
    while True:
        job = await job_state(client, job_id)
        if job["bytes_done"] >= at_least or time.monotonic() > end:
            assert job["bytes_done"] >= at_least, job
            return job
        await asyncio.sleep(0.05)


def library_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
