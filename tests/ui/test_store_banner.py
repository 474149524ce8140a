"""The store file deleted while the router runs: detected by its inode, a fresh file holding the
old file's rows, an error in the log, a metric, and a banner in the WebUI (docs/store.md).

Its own router (the session one is shared by the other UI tests), with a short
`flush_interval` so the writer's identity check runs every 0.3 s; a real headless browser.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.harness import RouterHarness, chat
from tests.support.router_process import RouterProcess
from tests.ui.conftest import wait_until


@pytest.fixture
def store_router(tmp_path: Path) -> Iterator[tuple[RouterProcess, Path]]:
    h = RouterHarness(tmp_path)
    h.model("chat-a")
    db = tmp_path / "store" / "router.sqlite"
    process = RouterProcess(
        h, extra={"analytics": {"database_path": str(db), "flush_interval": "0.3s"}}
    )
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API may own this thread's loop
        pool.submit(asyncio.run, process.start()).result()
    try:
        yield process, db
    finally:
        process.kill()


def _count(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM analytics_events").fetchone()[0])


def test_a_deleted_store_file_is_reopened_and_the_webui_says_so(
    page: Page, store_router: tuple[RouterProcess, Path]
) -> None:
    router, db = store_router
    http = httpx.Client(base_url=router.base, timeout=30)
    page.goto(router.base + "/router/ui/")
    expect(page.locator("#connection")).to_have_text("connected")
    expect(page.locator("#notices")).to_be_hidden()
    for _ in range(3):
        assert http.post("/v1/chat/completions", json=chat("chat-a")).status_code == 200
    assert http.post("/router/v1/site/analytics/flush").status_code == 200
    assert _count(db) == 3
    old_inode = db.stat().st_ino
    db.unlink()  # as `rm` would, the -wal and -shm left in place

    banner = page.locator("#notices")
    expect(banner).to_contain_text("was deleted while the router ran", timeout=15_000)
    # The deleted file was still open: its rows were copied into the fresh one.
    expect(banner).to_contain_text("copied into it: nothing recorded was lost")
    assert db.exists() and db.stat().st_ino != old_inode
    assert http.post("/v1/chat/completions", json=chat("chat-a")).status_code == 200
    assert http.post("/router/v1/site/analytics/flush").status_code == 200
    wait_until(lambda: _count(db) == 4, "the old rows and the new request in the fresh file", 10)
    metrics = http.get("/metrics").text
    assert "tensor_router_store_file_replaced_total 1.0" in metrics
    log = router.log.read_text()
    assert "was deleted while the router ran" in log and "ERROR" in log
    # A browser that comes later still gets the banner (the hello event repeats it).
    page.reload()
    expect(page.locator("#notices p")).to_have_count(1)
    http.close()
