"""W15 (keyboard) on the data pages: a sort, a filter, a view toggle or an Enable redraws part
of a page, and the focus stays on the control that was used (never thrown back to the top)."""

from __future__ import annotations

from playwright.sync_api import Route, expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage
from tests.ui.data_router import DataRouter

data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui


def _focused(ui: GuardedPage) -> str:
    text: str = ui.page.evaluate(
        "(() => { const e = document.activeElement;"
        " return `${e.tagName} ${e.getAttribute('name') || ''} ${e.textContent.trim()}`; })()"
    )
    return text


def test_sorting_and_toggling_keep_the_focus(
    data_ui_router: DataRouter, data_ui: GuardedPage
) -> None:
    ui = data_ui
    ui.goto("/router/ui/analytics?range=30d")
    per_model = ui.page.get_by_role("region", name="Per model")
    header = per_model.get_by_role("button", name="Latency p95")
    header.focus()
    ui.page.keyboard.press("Enter")
    expect(per_model.locator("th[aria-sort=ascending]")).to_contain_text("Latency p95")
    assert _focused(ui).startswith("BUTTON  Latency p95"), _focused(ui)
    ui.page.keyboard.press("Enter")
    expect(per_model.locator("th[aria-sort=descending]")).to_contain_text("Latency p95")
    assert "msort=p95&mdir=desc" in ui.page.url
    toggle = ui.page.get_by_role("button", name="Show as table")
    toggle.focus()
    ui.page.keyboard.press("Space")
    expect(ui.page.get_by_role("table", name="Requests per time bucket")).to_be_visible()
    assert _focused(ui) == "BUTTON  Show as table", _focused(ui)
    ui.page.get_by_role("button", name="Last 7 days").focus()
    ui.page.keyboard.press("Enter")
    expect(ui.page.get_by_role("button", name="Last 7 days")).to_have_attribute(
        "aria-pressed", "true"
    )
    assert _focused(ui) == "BUTTON  Last 7 days", _focused(ui)


def test_a_filter_keeps_the_focus(data_ui_router: DataRouter, data_ui: GuardedPage) -> None:
    ui = data_ui
    ui.goto("/router/ui/load-errors")
    expect(ui.page.locator("main h1")).to_have_text("Load errors")
    phase = ui.page.get_by_label("Phase")
    phase.focus()
    phase.select_option("serving")
    expect(phase).to_have_value("serving")
    assert _focused(ui).startswith("SELECT phase"), _focused(ui)


def test_enable_by_keyboard_leaves_the_focus_on_the_row(
    data_ui_router: DataRouter, data_ui: GuardedPage
) -> None:
    ui = data_ui
    data_ui_router.post("/router/v1/site/webuis/session", {"id": "llama", "enabled": False})
    ui.goto("/router/ui/webuis")
    row = ui.page.locator("main table tbody tr").filter(has_text="/router/webuis/llama/")
    row.get_by_role("button", name="Enable", exact=False).focus()
    ui.page.keyboard.press("Enter")
    expect(row.get_by_role("button", name="Disable", exact=False)).to_be_focused()
    ui.page.keyboard.press("Enter")
    expect(row.get_by_role("button", name="Enable", exact=False)).to_be_focused()


def test_clear_all_by_keyboard_ends_on_what_happened(
    data_ui_router: DataRouter, data_ui: GuardedPage
) -> None:
    ui = data_ui
    error = {
        "id": 1,
        "time": 1.0,
        "node_id": "n",
        "model": "m",
        "backend": "llamacpp",
        "reason": "r",
        "exit_code": 1,
        "output_tail": None,
        "attempt_id": None,
    }
    reads: list[int] = []

    def listing(route: Route) -> None:
        if route.request.method != "GET":
            route.continue_()  # the DELETE goes to the router
            return
        reads.append(1)  # one error at first, none once it was cleared
        route.fulfill(json={"nodes": ["n"], "errors": [error] if len(reads) == 1 else []})

    ui.page.route("**/router/v1/site/load-errors**", listing)
    ui.goto("/router/ui/load-errors")
    clear = ui.page.get_by_role("button", name="Clear all")
    expect(clear).to_be_enabled()
    clear.focus()
    ui.page.keyboard.press("Enter")
    expect(ui.page.get_by_role("dialog")).to_be_visible()
    ui.page.keyboard.press("Escape")  # Esc closes the dialog and the focus comes back
    expect(ui.page.get_by_role("dialog")).to_have_count(0)
    expect(clear).to_be_focused()
    ui.page.keyboard.press("Enter")
    expect(ui.page.get_by_role("dialog").get_by_role("button", name="Clear all")).to_be_focused()
    ui.page.keyboard.press("Enter")
    status = ui.page.get_by_role("status").filter(has_text="Removed")
    expect(status).to_be_focused()
    expect(clear).to_be_disabled()
