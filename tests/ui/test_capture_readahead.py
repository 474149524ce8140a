"""The load capture's detail page shows what the read-ahead had done when the load began
(issue 26, docs/swaps.md), over the seeded store of tests/ui/data_router.py."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage
from tests.ui.data_router import DataRouter

data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui


def _fact(ui: GuardedPage, attempt: str, name: str) -> str:
    ui.goto(f"/router/ui/captures?attempt={attempt}")
    expect(ui.page.locator("main h1")).to_have_text("Load capture")
    term = ui.page.locator("dl.facts dt", has_text=name)
    expect(term).to_have_count(1)
    return str(term.locator("xpath=following-sibling::dd[1]").inner_text())


def test_the_capture_detail_shows_the_read_ahead_beside_the_duration(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ran = _fact(data_ui, data_ui_router.ids["paged"], "Read-ahead")
    assert ran == "done: 258.4 MiB read in 461 ms"
    none = _fact(data_ui, data_ui_router.ids["truncated"], "Read-ahead")
    assert none.startswith("none (no drain before this load")
