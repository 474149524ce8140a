"""W5 (the Load errors half): a load that fails while the page is open, started over HTTP and
not from the page, appears in the list through the `failed` event, without a reload."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.ui.conftest import GuardedPage, UiRouter


def test_a_failed_load_appears_in_load_errors_without_a_reload(
    ui_router: UiRouter, ui: GuardedPage
) -> None:
    ui.goto("/router/ui/load-errors?model=crashy")
    expect(ui.page.locator("main h1")).to_have_text("Load errors")
    rows = ui.page.locator("main table tbody tr")
    before = sum(
        1 for e in ui_router.get("/router/v1/site/load-errors")["errors"] if e["model"] == "crashy"
    )
    expect(ui.page.locator("main table caption")).to_contain_text(f"{before} of")
    ui.page.evaluate("window.__sameDocument = true")
    # Started over HTTP, not from the page: the `failed` event makes the page read the list.
    failed = ui_router.http.post("/router/v1/load", json={"model": "crashy"})
    assert failed.status_code >= 500, failed.text
    expect(ui.page.locator("main table caption")).to_contain_text(f"{before + 1} of")
    expect(rows.first).to_contain_text("crashy")
    expect(rows.first).to_contain_text("3")  # the fake backend's exit code
    assert ui.page.evaluate("window.__sameDocument") is True
