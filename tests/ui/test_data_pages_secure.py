"""The data pages on a secure router, signed in with the session cookie: every state change
they make (Flush, Clear all, a Web UI's Enable) carries the session's CSRF token and works, the
store download and the pages' reads ride on the cookie, and nothing is refused on the way."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import yaml
from playwright.sync_api import Page, expect

from tests.ui.conftest import ADMIN_KEY, GuardedPage, UiRouter


def _record_a_load_error(router: UiRouter) -> None:
    """A row for Clear all to remove, written into the router's store file (WAL: the router's
    reader sees it; the store has no API that adds one)."""
    config = yaml.safe_load(router.process.config.read_text())
    with sqlite3.connect(config["analytics"]["database_path"]) as db:
        db.execute(
            "INSERT INTO load_errors (time, node_id, model, backend, reason) VALUES (?, ?, ?, ?, ?)",
            (time.time(), "local", "alpha", "llamacpp", "seeded for the secure test"),
        )


def _sign_in(ui: GuardedPage, path: str) -> None:
    ui.goto(path)
    expect(ui.page.locator("main h1")).to_have_text("Sign in")
    ui.page.get_by_label("Admin key").fill(ADMIN_KEY)
    ui.page.get_by_label("Admin key").press("Enter")


def test_signed_in_state_changes_carry_the_csrf_token(
    secure_router: UiRouter, page: Page, tmp_path: Path
) -> None:
    ui = GuardedPage(page, secure_router, tmp_path)
    _sign_in(ui, "/router/ui/analytics?range=1h")
    expect(ui.page.locator("main h1")).to_have_text("Analytics")
    expect(ui.page.locator("[data-stat=requests] dd")).to_be_visible()

    with ui.page.expect_request("**/router/v1/site/analytics/flush") as flush:
        ui.page.get_by_role("button", name="Flush to disk").click()
    assert flush.value.headers.get("x-csrf-token"), "a POST made with the cookie carries the token"
    expect(ui.page.get_by_role("status").filter(has_text="Flushed")).to_be_visible()
    with ui.page.expect_download() as download:
        ui.page.get_by_role("link", name="Download the store").click()
    assert download.value.path().read_bytes()[:16] == b"SQLite format 3\x00"

    _record_a_load_error(secure_router)
    ui.goto("/router/ui/load-errors")
    expect(ui.page.locator("main h1")).to_have_text("Load errors")
    with ui.page.expect_request(lambda r: r.method == "DELETE") as cleared:
        ui.page.get_by_role("button", name="Clear all").click()
        ui.page.get_by_role("dialog").get_by_role("button", name="Clear all").click()
    assert cleared.value.headers.get("x-csrf-token")
    expect(ui.page.get_by_role("status").filter(has_text="Removed")).to_have_text(
        "Removed 1 load error."
    )

    ui.goto("/router/ui/webuis")
    row = ui.page.locator("main table tbody tr").filter(has_text="/router/webuis/llama/")
    row.get_by_role("button", name="Enable", exact=False).click()
    expect(row.get_by_role("link", name="Open", exact=False)).to_be_visible()
    ui.check()
