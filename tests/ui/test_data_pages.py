"""W1/W14/W15/W16 for the data pages (analytics, load captures, load errors, benchmarks,
download, web UIs): each renders its one h1 and reloads from a deep link, its first load
makes a bounded number of API calls, axe finds no serious or critical violation in the light
and the dark theme, and at 390 px and 1280 px nothing scrolls sideways.
"""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Route, expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage
from tests.ui.data_router import DataRouter, page_calls, serious

data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui

# page id -> (title, deep link query, most API calls its first load may make, a ready marker)
PAGES: dict[str, tuple[str, str, int, str]] = {
    "analytics": ("Analytics", "range=7d&view=table", 1, "table"),
    "captures": ("Load captures", "status=ok&kind=load", 1, "table"),
    "load-errors": ("Load errors", "sort=model&dir=asc", 1, "table"),
    "benchmarks": ("Benchmarks", "model=alpha", 2, "table"),
    "download": ("Download", "q=", 2, "main p, main table"),
    "webuis": ("Web UIs", "", 1, "main table, main .unavailable"),
    "keys": ("Keys", "", 2, "main table"),  # the list and the per-key analytics summary
}


def _allow_missing_features(ui: GuardedPage) -> None:
    # A router without the downloads and web UI routes answers 501 and the pages say so in
    # words (test_unavailable_features_are_said_in_words imitates one).
    ui.allow(r"^/router/v1/site/download/", 501)
    ui.allow(r"^/router/v1/site/webuis$", 501)


def _open(ui: GuardedPage, page_id: str, query: str = "") -> None:
    title, _, _, ready = PAGES[page_id]
    ui.goto(f"/router/ui/{page_id}{'?' + query if query else ''}")
    # A capture's detail view is its own h1; every other view is titled as its page.
    expect(ui.page.locator("main h1")).to_have_text(
        "Load capture" if "attempt=" in query else title
    )
    expect(ui.page.locator(ready).first).to_be_visible()


@pytest.mark.parametrize("page_id", list(PAGES))
def test_page_renders_its_h1_reloads_and_keeps_to_its_call_budget(
    data_ui_router: DataRouter, data_ui: GuardedPage, page_id: str
) -> None:
    ui = data_ui
    title, query, budget, _ = PAGES[page_id]
    _open(ui, page_id, query)
    expect(ui.page.locator("h1")).to_have_count(1)
    expect(ui.page.locator('nav a[aria-current="page"]')).to_have_text(title)
    ui.page.wait_for_load_state("networkidle")
    calls = page_calls(ui)
    assert 1 <= len(calls) <= budget, calls
    ui.api_calls.clear()
    ui.page.reload()
    expect(ui.page.locator("main h1")).to_have_text(title)
    ui.page.wait_for_load_state("networkidle")
    assert len(page_calls(ui)) == len(calls), "a reload asks the same questions"
    assert title in ui.page.title()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_serious_violation_in_either_theme(
    data_ui_router: DataRouter, data_ui: GuardedPage, scheme: str
) -> None:
    ui = data_ui
    ui.page.emulate_media(color_scheme=scheme)
    axe = Axe()
    found: dict[str, list[str]] = {}
    views = [(pid, q) for pid, (_, q, _, _) in PAGES.items()]
    views += [("captures", f"attempt={data_ui_router.ids['paged']}"), ("analytics", "range=30d")]
    for page_id, query in views:
        _open(ui, page_id, query)
        ui.page.wait_for_load_state("networkidle")
        problems = serious(axe.run(ui.page))
        if problems:
            found[f"{page_id}?{query}"] = problems
    assert not found, found


@pytest.mark.parametrize("width", [390, 1280])
def test_no_page_scrolls_sideways(
    data_ui_router: DataRouter, data_ui: GuardedPage, width: int
) -> None:
    ui = data_ui
    ui.page.set_viewport_size({"width": width, "height": 800})
    views = [(pid, q) for pid, (_, q, _, _) in PAGES.items()]
    views.append(("captures", f"attempt={data_ui_router.ids['paged']}"))
    wide = {}
    for page_id, query in views:
        _open(ui, page_id, query)
        sizes = ui.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        if sizes[0] > sizes[1]:
            wide[page_id] = sizes
        # Every button outside a table, and every table's scroll box, lies inside the
        # viewport's width (a wide table scrolls in its own box, not the page).
        outside = ui.page.locator("main button:visible, main .table-wrap").evaluate_all(
            "els => els.filter(e => !e.parentElement.closest('.table-wrap'))"
            ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)"
            ".map(e => e.textContent.slice(0, 40))"
        )
        if outside:
            wide[f"{page_id} buttons"] = outside
    assert not wide, wide


def test_unavailable_features_are_said_in_words(
    data_ui_router: DataRouter, data_ui: GuardedPage
) -> None:
    ui = data_ui
    # This router has downloads switched off: the capability says so, and so does the page.
    caps = data_ui_router.get("/router/v1/site/download/capabilities")
    assert caps["nodes"][0]["capability"]["enabled"] is False
    _open(ui, "download")
    expect(ui.page.locator("main .unavailable")).to_contain_text("Downloads are off on this router")
    expect(ui.page.get_by_role("alert")).to_have_count(0)

    # A router version without these routes answers 501 (app.py's dispatcher, in the
    # contract's error shape): imitated here, since this router has them.
    def not_here(route: Route) -> None:
        body = {
            "error": {"message": "not available in this version", "type": "not_supported_error"}
        }
        route.fulfill(status=501, json=body)

    _allow_missing_features(ui)
    ui.page.route("**/router/v1/site/download/**", not_here)
    ui.page.route("**/router/v1/site/webuis", not_here)
    _open(ui, "download")
    expect(ui.page.locator("main .unavailable")).to_have_text(
        "Downloads are not available on this router: this version does not offer them."
    )
    _open(ui, "webuis")
    expect(ui.page.locator("main .unavailable")).to_have_text(
        "Backend web UIs are not available on this router: this version does not offer them."
    )
    expect(ui.page.get_by_role("alert")).to_have_count(0)
