"""The Keys page (issue 35): create a scoped key (its secret shown once, then gone from the
page and never in the list), the list with today's usage against the quota, change through
the form (PATCH of what changed), revoke through the confirm dialog. The router is real; the
new key is then used against it over HTTP. Screenshots of each step go to the test's folder
(and, light and dark, to $SCREENSHOT_DIR/keys-*.png when that is set; `make screenshots`
writes docs/screenshots/keys-*.png with every other page of the nav)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.sync_api import expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage
from tests.ui.data_router import DataRouter, page_calls

data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui

# Set: the light and dark views are copied there too (a run of the suite leaves docs/ alone).
DOCS = os.environ.get("SCREENSHOT_DIR")


def test_create_show_the_secret_once_change_and_revoke(
    data_ui_router: DataRouter, data_ui: GuardedPage
) -> None:
    router, ui, page = data_ui_router, data_ui, data_ui.page
    ui.goto("/router/ui/keys")
    expect(page.locator("main h1")).to_have_text("Keys")
    page.wait_for_load_state("networkidle")
    # The list and the analytics summary (its per-key grouping), nothing else.
    assert page_calls(ui) == [("GET", "/router/v1/keys"), ("GET", "/router/v1/site/analytics")]

    page.get_by_label("Name").fill("ui-agent")
    page.get_by_label("Models").fill("alpha")
    page.get_by_label("Class").select_option("batch")
    page.get_by_label("Tokens per day").fill("1000")
    page.get_by_role("button", name="Create key").click()
    secret_box = page.locator("[data-secret]")
    expect(secret_box).to_contain_text("trk-")
    secret = secret_box.inner_text().strip()
    ui.shot("keys-created")
    row = page.locator('main table tbody tr[data-key="ui-agent"]')
    expect(row).to_contain_text("0 of 1,000 tokens today")
    expect(row).to_contain_text("batch")

    # The key works, sees only its models, and the list never holds its secret.
    models = router.http.get("/v1/models", headers={"Authorization": f"Bearer {secret}"})
    assert [m["id"] for m in models.json()["data"]] == ["alpha"]
    listed = router.http.get("/router/v1/keys").text
    assert "ui-agent" in listed and secret not in listed

    page.get_by_role("button", name="I have copied it").click()
    expect(secret_box).to_have_count(0)
    page.reload()
    expect(page.locator('main table tbody tr[data-key="ui-agent"]')).to_be_visible()
    assert secret not in page.content()

    row.get_by_role("button", name="Change ui-agent").click()
    expect(page.get_by_label("Name")).to_have_attribute("readonly", "")
    page.get_by_label("Tokens per day").fill("2000")
    page.get_by_role("button", name="Save changes").click()
    expect(row).to_contain_text("0 of 2,000 tokens today")
    assert router.get("/router/v1/keys")["data"][0]["daily_tokens"] == 2000
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        shot = ui.shot(f"keys-{scheme}")
        if DOCS:
            shutil.copy(shot, Path(DOCS) / f"keys-{scheme}.png")

    row.get_by_role("button", name="Revoke ui-agent").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Revoke ui-agent?")
    dialog.get_by_role("button", name="Revoke").click()
    expect(row).to_contain_text("revoked")
    assert router.get("/router/v1/keys")["data"][0]["revoked"]
    ui.shot("keys-revoked")


def test_use_per_key_shows_requests_errors_tokens_and_queue_wait(
    data_ui_router: DataRouter, data_ui: GuardedPage
) -> None:
    """Issue 35's analytics per key on the Keys page: the seeded alpha traffic of the last hour
    was sent by two keys in turn (tests/ui/data_router.py), the rest by no scoped key."""
    ui, page = data_ui, data_ui.page
    ui.goto("/router/ui/keys")
    use = page.get_by_role("region", name="Use per key, last 24 hours")
    expect(use.locator("tbody tr")).to_have_count(3)
    cells = use.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    shown = {row[0]: row[1:] for row in cells}
    summary = data_ui_router.get("/router/v1/site/analytics")
    for row in summary["keys"]:
        name = row["key"] or "(no scoped key)"
        assert shown[name][:3] == [
            f"{row['requests']:,}",
            f"{row['errors']:,}",
            f"{row['tokens']['total']:,}",
        ], name
    # Requests, errors, tokens: alice sent the even ones, nightly the odd ones (two failed).
    assert shown["alice"][:3] == ["6", "0", "180"] and shown["nightly"][:3] == ["6", "2", "180"]
    assert all(cell.endswith(" ms") for cell in shown["nightly"][3:5])  # queue wait p50, p95
    ui.shot("keys-use")
