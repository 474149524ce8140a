"""Issue 36: a stored trace id links to the trace viewer named by observability.trace_url, on
the load capture's detail page and in the analytics page's slowest traced requests, over a
store seeded through the real Store and served by a real `tensor-router start`."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import Page, expect

from router.store.rows import COLUMNS, INSERT_EVENT
from tests.support.harness import RouterHarness
from tests.support.router_process import RouterProcess
from tests.ui.conftest import GuardedPage, UiRouter, _require_chromium
from tests.ui.data_router import _event, _seed_store, run_async

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
VIEWER = "http://jaeger.test:16686/trace/{trace_id}"


def _seed(path: Path, now: float) -> str:
    async def fill(store: Any) -> str:
        attempt: str = store.load_attempts.start(
            model="alpha", backend="llamacpp", lane="text", started_at=now - 60, trace_id=TRACE
        )
        store.load_attempts.finish(attempt, "ok", None, None, ended_at=now - 58)
        return attempt

    attempt: str = run_async(_seed_store(path, 1.0, fill))
    traced = list(_event(now - 30, "alpha", "text", 200, 1234.0, 800.0, (5, 6)))
    traced[COLUMNS.index("trace_id")] = TRACE
    plain = _event(now - 20, "alpha", "text", 200, 2000.0, 0.0, (5, 6))
    with sqlite3.connect(path) as db:
        db.executemany(INSERT_EVENT, [tuple(traced), plain])
    return attempt


@pytest.fixture
def traced_ui(tmp_path: Path, page: Page) -> Iterator[tuple[GuardedPage, str]]:
    _require_chromium()
    h = RouterHarness(tmp_path / "router")
    h.model("alpha")
    process = RouterProcess(h)
    config = yaml.safe_load(process.config.read_text())
    config["analytics"].update(load_capture_enabled=True, writer_process=False)
    config["observability"] = {"trace_url": VIEWER}
    process.config.write_text(yaml.safe_dump(config))
    attempt = _seed(Path(config["analytics"]["database_path"]), time.time())
    run_async(process.start())
    router = UiRouter(process, h)
    page.set_default_timeout(15_000)
    guarded = GuardedPage(page, router, tmp_path / "shots")
    try:
        yield guarded, attempt
        guarded.check()
    finally:
        router.http.close()
        process.kill()


def test_trace_ids_link_to_the_configured_viewer(traced_ui: tuple[GuardedPage, str]) -> None:
    ui, attempt = traced_ui
    href = VIEWER.replace("{trace_id}", TRACE)
    ui.goto(f"/router/ui/captures?attempt={attempt}")
    expect(ui.page.locator("main h1")).to_have_text("Load capture")
    link = ui.page.locator("dl.facts dt", has_text="Trace").locator(
        "xpath=following-sibling::dd[1]//a"
    )
    expect(link).to_have_attribute("href", href)
    expect(link).to_have_text(TRACE)

    ui.goto("/router/ui/analytics?range=1h")
    section = ui.page.get_by_role("region", name="Slowest traced requests")
    expect(section.get_by_role("link", name=TRACE)).to_have_attribute("href", href)
    expect(section.locator("tbody tr")).to_have_count(1)  # the untraced request is not listed
