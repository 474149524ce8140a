"""The Lending page on a secure router, signed in with the session cookie: its state changes
(a guardian assigned and cleared, a setting saved and put back) carry the session's CSRF token
and work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.support.harness import RouterHarness, vision_model
from tests.support.router_process import RouterProcess
from tests.ui.conftest import ADMIN_KEY, GuardedPage, UiRouter, secure, serving

SETTINGS = "/router/v1/site/offload/settings"


@pytest.fixture(scope="module")
def secure_lending(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiRouter]:
    h = RouterHarness(tmp_path_factory.mktemp("ui-secure-lending"))
    h.model("plain")
    vision_model(h, "eye")
    with serving(secure(RouterProcess(h)), h) as router:
        router.http.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        yield router


def sign_in(ui: GuardedPage, path: str) -> None:
    ui.goto(path)
    expect(ui.page.locator("main h1")).to_have_text("Sign in")
    ui.page.get_by_label("Admin key").fill(ADMIN_KEY)
    ui.page.get_by_label("Admin key").press("Enter")
    expect(ui.page.locator("main h1")).to_have_text("Lending")


def test_signed_in_changes_carry_the_csrf_token(
    secure_lending: UiRouter, page: Page, tmp_path: Path
) -> None:
    ui = GuardedPage(page, secure_lending, tmp_path)
    sign_in(ui, "/router/ui/lending?section=guardians")
    form = ui.page.get_by_role("form", name="Assign a guardian")
    form.get_by_label("Scope").select_option("node")
    form.get_by_label("Guardian").select_option("local/eye")
    with ui.page.expect_request(
        lambda r: r.method == "POST" and "guardian-models" in r.url
    ) as sent:
        form.get_by_role("button", name="Assign").click()
    assert sent.value.headers.get("x-csrf-token"), "a POST made with the cookie carries the token"
    listing = ui.page.locator("main table", has_text="Guardian assignments")
    expect(listing).to_contain_text("every text-only model on local")
    stored = secure_lending.get("/router/v1/site/guardian-models")["assignments"]
    assert [(a["scope"], a["node_id"], a["guardian"]["model_id"]) for a in stored] == [
        ("node", "local", "eye")
    ]
    with ui.page.expect_request(lambda r: r.method == "DELETE") as cleared:
        listing.get_by_role("button", name="Clear the node guardian", exact=False).click()
        ui.page.get_by_role("dialog").get_by_role("button", name="Clear").click()
    assert cleared.value.headers.get("x-csrf-token")
    expect(listing).to_contain_text("No guardian assigned")
    assert secure_lending.get("/router/v1/site/guardian-models")["assignments"] == []

    ui.page.get_by_role("button", name="Settings").click()
    form = ui.page.get_by_role("form", name="Lending settings")
    form.get_by_label("scheduling_backend_depth", exact=True).fill("3")
    with ui.page.expect_request(
        lambda r: r.method == "POST" and "offload/settings" in r.url
    ) as sent:
        form.get_by_role("button", name="Save settings").click()
    assert sent.value.headers.get("x-csrf-token")
    expect(ui.page.locator("main [role=status]").first).to_have_text(
        "Saved scheduling_backend_depth."
    )
    depth = {s["key"]: s for s in secure_lending.get(SETTINGS)["settings"]}[
        "scheduling_backend_depth"
    ]
    assert (depth["saved"], depth["effective"]) == (3, 3)
    with ui.page.expect_request(lambda r: r.method == "DELETE") as reset:
        form.get_by_role("button", name="Default for all").click()
        ui.page.get_by_role("dialog").get_by_role("button", name="Default for all").click()
    assert reset.value.headers.get("x-csrf-token")
    expect(form.get_by_label("scheduling_backend_depth", exact=True)).to_have_value("2")
    assert all(s["saved"] is None for s in secure_lending.get(SETTINGS)["settings"])
    ui.check()
