"""The store fails loudly and in the right way: a full disk and a read-only filesystem, for real.

The database lives on a small tmpfs mounted for the test (root only: without the privilege to
mount, these tests skip and say so). A full disk at run time: inference keeps being served,
flush, analytics reads and the store download answer 503 in the OpenAI shape naming the cause
within the store's deadline, and the held events are written once space returns. A store that
cannot be opened at start is one line naming `analytics.database_path` and the reason.
Real `tensor-router start` processes (tests/router_process.py), fake backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from router.store.health import STORE_DEADLINE
from tests.support.harness import RouterHarness, chat
from tests.support.router_process import CLI, RouterProcess, new_router


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path) -> Path:
    """A file that takes every free byte of `folder`'s filesystem."""
    filler = folder / "filler"
    with filler.open("wb") as out:
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                out.write(b"\0" * 65536)
                out.flush()
    with contextlib.suppress(OSError):
        with filler.open("ab") as out:  # the last partial block
            while True:
                out.write(b"\0" * 512)
                out.flush()
    return filler


def _start_fails(h: RouterHarness, db: Path) -> subprocess.CompletedProcess[str]:
    router = new_router(h, extra={"analytics": {"database_path": str(db)}})
    return subprocess.run(
        [str(CLI), "start", "--config", str(router.config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str], reason: str) -> None:
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if "analytics.database_path" in line]
    assert len(lines) == 1 and reason in lines[0], out[-2000:]


def test_a_store_on_a_read_only_filesystem_is_one_line_at_start(
    tmp_harness: RouterHarness,
) -> None:
    with tmpfs(tmp_harness.tmp / "ro", "1m") as folder:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        done = _start_fails(tmp_harness, folder / "router.sqlite")
    _one_line(done, "read-only")


def test_a_store_on_a_full_disk_is_one_line_at_start(tmp_harness: RouterHarness) -> None:
    with tmpfs(tmp_harness.tmp / "full", "1m") as folder:
        fill(folder)
        done = _start_fails(tmp_harness, folder / "router.sqlite")
    _one_line(done, "full")


async def _count(db: Path) -> int:
    def count() -> int:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(*) FROM analytics_events").fetchone()[0])

    return await asyncio.to_thread(count)


async def _refused(client: httpx.AsyncClient, method: str, path: str) -> tuple[dict, float]:
    started = time.monotonic()
    r = await client.request(method, path, timeout=STORE_DEADLINE * 3)
    took = time.monotonic() - started
    assert r.status_code == 503, (path, r.status_code, r.text[:300])
    return r.json()["error"], took


async def test_a_full_disk_answers_503_naming_it_and_keeps_serving(
    tmp_harness: RouterHarness,
) -> None:
    h = tmp_harness
    h.model("chat-a")
    with tmpfs(h.tmp / "store", "8m") as folder:
        db = folder / "router.sqlite"
        router: RouterProcess = new_router(
            h, extra={"analytics": {"database_path": str(db), "flush_interval": "0.2s"}}
        )
        await router.start()
        async with httpx.AsyncClient(base_url=router.base, timeout=30) as client:
            for _ in range(5):
                assert (
                    await client.post("/v1/chat/completions", json=chat("chat-a"))
                ).status_code == 200
            assert (await client.post("/router/v1/site/analytics/flush")).status_code == 200
            filler = await asyncio.to_thread(fill, folder)
            for _ in range(10):  # inference is served while the disk is full
                assert (
                    await client.post("/v1/chat/completions", json=chat("chat-a"))
                ).status_code == 200
            refusals = await asyncio.gather(
                _refused(client, "POST", "/router/v1/site/analytics/flush"),
                _refused(client, "GET", "/router/v1/site/analytics?range=1h"),
                _refused(client, "GET", "/router/v1/site/store/download"),
            )
            for error, took in refusals:
                assert (
                    "disk is full" in error["message"]
                    and "analytics.database_path" in error["message"]
                )
                assert error["code"] == "store_unavailable" and str(db) not in error["message"]
                assert took < STORE_DEADLINE + 5.0
            filler.unlink()  # space returns: the held events are written
            r = await client.post("/router/v1/site/analytics/flush", timeout=STORE_DEADLINE * 3)
            assert r.status_code == 200, r.text
            assert await _count(db) == 15
        log = router.log.read_text()
        router.kill()
    assert "no transaction is active" not in log
    assert "full" in log  # the writer logged the real cause
