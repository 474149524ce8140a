"""The Web UIs page: the catalog as the API gives it, Enable/Disable through
POST /site/webuis/session, Load of a compatible model, and Open as a link to
/router/webuis/<kind>/ (which redirects to the backend-UI listener's own origin: checked over
HTTP, never followed by the admin page)."""

from __future__ import annotations

from urllib.parse import urlsplit

from playwright.sync_api import expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage, wait_until
from tests.ui.data_router import DataRouter, page_calls

data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui

CATALOG = "/router/v1/site/webuis"


def _entry(router: DataRouter, kind: str) -> dict:
    return next(e for e in router.get(CATALOG)["data"] if e["id"] == kind)


def test_enable_load_and_open_a_backend_webui(
    data_ui_router: DataRouter, data_ui: GuardedPage
) -> None:
    router, ui = data_ui_router, data_ui
    catalog = router.http.get(CATALOG)
    if catalog.status_code == 501:  # this router has no backend WebUIs yet: said in words
        ui.allow(rf"^{CATALOG}$", 501)
        ui.goto("/router/ui/webuis")
        expect(ui.page.locator("main .unavailable")).to_contain_text("not available on this router")
        return
    for entry in catalog.json()["data"]:
        router.post(f"{CATALOG}/session", {"id": entry["id"], "enabled": False})
    ui.goto("/router/ui/webuis")
    expect(ui.page.locator("main h1")).to_have_text("Web UIs")
    rows = ui.page.locator("main table tbody tr")
    expect(rows).to_have_count(len(catalog.json()["data"]))
    assert page_calls(ui) == [("GET", CATALOG)]
    llama = rows.filter(has_text="/router/webuis/llama/")
    expect(llama).to_contain_text("disabled")
    expect(llama.get_by_role("link")).to_have_count(0)

    llama.get_by_role("button", name="Enable llama", exact=False).click()
    expect(llama.get_by_role("button", name="Disable", exact=False)).to_be_visible()
    assert _entry(router, "llama")["enabled"] is True
    open_link = llama.get_by_role("link", name="Open", exact=False)
    expect(open_link).to_have_attribute("href", "/router/webuis/llama/")
    expect(open_link).to_have_attribute("target", "_blank")

    llama.get_by_role("combobox", name="Model for", exact=False).select_option("alpha")
    llama.get_by_role("button", name="Load a model for", exact=False).click()
    expect(llama).to_contain_text("serving alpha", timeout=30_000)
    wait_until(lambda: _entry(router, "llama")["active_model_id"] == "alpha", "alpha serves llama")

    # Open: the management route answers with a redirect to the backend-UI origin.
    opened = router.http.get("/router/webuis/llama/", follow_redirects=False)
    assert opened.status_code == 302, opened.text
    target = urlsplit(opened.headers["Location"])
    assert target.path == "/router/webuis/llama/"
    assert f"{target.scheme}://{target.netloc}" != router.base, "a backend UI has its own origin"

    llama.get_by_role("button", name="Disable", exact=False).click()
    expect(llama).to_contain_text("disabled")
    assert _entry(router, "llama")["enabled"] is False
    router.post("/router/v1/unload", {"target": "all"})
