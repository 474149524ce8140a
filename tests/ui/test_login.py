"""W3: the sign-in view. Against a secure router when it serves the session API
(`/router/v1/ui/session`); the view's own handling of the contract's answers (401, 403, the
redirect back, no open redirect) is checked with the session route answered in the browser."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Page, Route, expect

from tests.ui.conftest import ADMIN_KEY, INFERENCE_KEY, GuardedPage, UiRouter

NODE = {"node_id": "local", "version": "0.1.0", "bind": "127.0.0.1:8080", "profile": "secure"}


def session_answer(authenticated: bool) -> dict[str, Any]:
    return {
        "authenticated": authenticated,
        "login_required": True,
        "profile": "secure",
        "csrf_token": "tok-1" if authenticated else None,
        "expires_at": None,
        "node": NODE,
    }


def fake_session(page: Page, keys: dict[str, int]) -> list[dict[str, Any]]:
    """The session route as the contract says; `keys` maps a key to the status it gets."""
    posted: list[dict[str, Any]] = []
    state = {"authenticated": False}

    def handle(route: Route) -> None:
        request = route.request
        if request.method == "POST":
            body = json.loads(request.post_data or "{}")
            posted.append(body)
            status = keys.get(body.get("key"), 401)
            if status != 200:
                error = {"error": {"message": "no", "type": "x", "param": None, "code": None}}
                route.fulfill(
                    status=status, content_type="application/json", body=json.dumps(error)
                )
                return
            state["authenticated"] = True
        answer = session_answer(state["authenticated"])
        route.fulfill(status=200, content_type="application/json", body=json.dumps(answer))

    page.route("**/router/v1/ui/session", handle)
    return posted


def test_sign_in_view_explains_refusals_and_returns_to_the_page(ui: GuardedPage) -> None:
    ui.allow(r"^/router/v1/ui/session$", 401)
    ui.allow(r"^/router/v1/ui/session$", 403)
    posted = fake_session(ui.page, {"good": 200, "inference": 403})
    ui.goto("/router/ui/login?next=/router/ui/nodes")
    expect(ui.page.locator("main h1")).to_have_text("Sign in")
    expect(ui.page.get_by_role("navigation").get_by_role("link")).to_have_count(0)
    key = ui.page.get_by_label("Admin key")
    expect(key).to_be_focused()
    key.fill("wrong")
    key.press("Enter")
    expect(ui.page.get_by_role("alert")).to_contain_text("not an admin key")
    key.fill("inference")
    ui.page.get_by_role("button", name="Sign in").click()
    expect(ui.page.get_by_role("alert")).to_contain_text("inference key cannot open")
    key.fill("good")
    key.press("Enter")
    expect(ui.page.locator("main h1")).to_have_text("Nodes")
    assert ui.page.url.endswith("/router/ui/nodes")
    assert [p["key"] for p in posted] == ["wrong", "inference", "good"]
    expect(ui.page.locator("#node-identity")).to_have_text(
        "local · v0.1.0 · 127.0.0.1:8080 · secure"
    )


def test_sign_in_never_redirects_off_the_ui(ui: GuardedPage) -> None:
    fake_session(ui.page, {"good": 200})
    ui.goto("/router/ui/login?next=//evil.example/x")
    ui.page.get_by_label("Admin key").fill("good")
    ui.page.get_by_label("Admin key").press("Enter")
    expect(ui.page.locator("main h1")).to_have_text("Overview")
    assert ui.page.url.startswith(ui.router.base + "/router/ui/")


def test_secure_router_login_csrf_and_logout(page: Page, secure_router: UiRouter) -> None:
    base = secure_router.base
    page.goto(base + "/router/ui/models")
    expect(page.locator("main h1")).to_have_text("Sign in")
    key = page.get_by_label("Admin key")
    key.fill(INFERENCE_KEY)
    key.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("inference key")
    key.fill(ADMIN_KEY)
    key.press("Enter")
    expect(page.locator("main h1")).to_have_text("Models")
    expect(page.locator("table tbody tr")).to_have_count(1)
    cookie = next(c for c in page.context.cookies() if c["name"] == "tensor_router_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/router/"
    # With the cookie but without the CSRF token a state change is refused.
    status = page.evaluate(
        "fetch('/router/v1/unload', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: '{}'}).then((r) => r.status)"
    )
    assert status == 403
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("main h1")).to_have_text("Sign in")
    assert page.evaluate("fetch('/router/v1/status').then((r) => r.status)") == 401
