"""W1/W2: the shell, its security headers, every page's h1, deep links and the nav."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from router.api.admin.ui_static import CSP
from tests.ui.conftest import GuardedPage, UiRouter

MY_PAGES = {"overview": "Overview", "models": "Models", "config": "Config", "nodes": "Nodes"}


def test_ui_answers_carry_the_security_headers(ui_router: UiRouter) -> None:
    for path in (
        "/router/ui/",
        "/router/ui/models?lane=text",
        "/router/ui/app.js",
        "/router/ui/app.css",
        "/router/ui/lib/dom.js",
        "/router/ui/no/such.js",
    ):
        response = ui_router.http.get(path)
        assert response.headers["Content-Security-Policy"] == CSP, path
        assert response.headers["X-Content-Type-Options"] == "nosniff", path
        assert response.headers["Referrer-Policy"] == "no-referrer", path
    assert ui_router.http.get("/router/ui/no/such.js").status_code == 404
    assert (
        ui_router.http.get("/router/ui/app.js")
        .headers["Content-Type"]
        .startswith("text/javascript")
    )
    assert ui_router.http.get("/router/ui/app.css").headers["Content-Type"].startswith("text/css")
    shell = ui_router.http.get("/router/ui/some/client/route")
    assert shell.status_code == 200 and shell.headers["Content-Type"].startswith("text/html")
    # No inline script or style anywhere in the shell (the CSP would block them anyway).
    assert not re.search(r"<script(?![^>]*\bsrc=)", shell.text)
    assert "style=" not in shell.text and "<style" not in shell.text


def test_bare_prefix_redirects_and_traversal_is_refused(ui_router: UiRouter) -> None:
    response = ui_router.http.get("/router/ui?x=1")
    assert response.status_code == 308 and response.headers["Location"] == "/router/ui/?x=1"
    for path in (
        "/router/ui/../classify.py",
        "/router/ui/.hidden.js",
        "/router/ui/%2e%2e/x.js",
        "/router/ui/lib/../../api/ui.py",
        "/router/ui/README.py",
    ):
        assert ui_router.http.get(path).status_code == 404, path


def test_the_shell_needs_no_credential_but_data_routes_do(ui_router: UiRouter) -> None:
    # The session router runs trusted_lan; the secure-profile refusals of the data routes are
    # tests/edge/test_auth_matrix.py's (it iterates ROUTES, the UI rows included).
    assert httpx.get(ui_router.base + "/router/ui/").status_code == 200


@pytest.mark.parametrize("page_id", list(MY_PAGES))
def test_every_page_renders_its_h1_and_reloads_from_a_deep_link(
    ui: GuardedPage, page_id: str
) -> None:
    ui.goto(f"/router/ui/{page_id}?q=x")
    expect(ui.page.locator("main h1")).to_have_text(MY_PAGES[page_id])
    expect(ui.page.locator("main h1")).to_have_count(1)
    expect(ui.page.locator('nav a[aria-current="page"]')).to_have_text(MY_PAGES[page_id])
    ui.page.reload()
    expect(ui.page.locator("main h1")).to_have_text(MY_PAGES[page_id])
    assert MY_PAGES[page_id] in ui.page.title()


def test_nav_links_switch_pages_without_a_reload(ui: GuardedPage) -> None:
    ui.goto("/router/ui/")
    expect(ui.page.locator("main h1")).to_have_text("Overview")
    ui.page.evaluate("window.__sameDocument = true")
    for page_id, title in MY_PAGES.items():
        ui.page.get_by_role("navigation").get_by_role("link", name=title).click()
        expect(ui.page.locator("main h1")).to_have_text(title)
        assert ui.page.url.endswith(f"/router/ui/{page_id}")
    assert ui.page.evaluate("window.__sameDocument") is True
    ui.page.go_back()
    expect(ui.page.locator("main h1")).to_have_text("Config")


def test_an_unknown_page_says_so(ui: GuardedPage) -> None:
    ui.goto("/router/ui/nonsense")
    expect(ui.page.locator("main h1")).to_have_text("Page not found")
    expect(ui.page.get_by_role("link", name="Go to the overview")).to_be_visible()
