"""W14-W16: axe in both themes, keyboard-only load/confirm/unload, the API calls each page's
first load makes, nothing polled while hidden, and no horizontal scroll at 390 and 1280 px."""

from __future__ import annotations

from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Locator, expect

from tests.ui.conftest import GuardedPage, wait_until

# What each page shows once its data is in, and the API calls its first load makes:
# the session, the event stream, then the page's own snapshot reads (never one per row).
PAGES: dict[str, tuple[str, str, list[str]]] = {
    "overview": (
        "Overview",
        "table",
        ["/ui/session", "/events", "/status", "/site/load-errors", "/site/load-captures"],
    ),
    "models": ("Models", "table", ["/ui/session", "/events", "/models"]),
    "config": ("Config", "table", ["/ui/session", "/events", "/models"]),
    "config?id=alpha": (
        "Config",
        "textarea",
        ["/ui/session", "/events", "/models", "/site/config-file/alpha"],
    ),
    "models?model=beta": (
        "Models",
        ".detail table",
        ["/ui/session", "/events", "/models", "/site/inventory", "/site/config-file/beta"],
    ),
    "nodes": ("Nodes", "table", ["/ui/session", "/events", "/site/inventory", "/site/nodes/state"]),
    "lending": ("Lending", "select", ["/ui/session", "/events", "/models"]),
    "lending?section=links&lane=text&model=alpha": (
        "Lending",
        "table",
        ["/ui/session", "/events", "/models", "/site/text-routing-groups"],
    ),
    "lending?section=guardians": (
        "Lending",
        "table",
        ["/ui/session", "/events", "/models", "/site/guardian-models"],
    ),
}
AXE = Axe()


def open_page(ui: GuardedPage, path: str) -> None:
    title, ready, _ = PAGES[path]
    ui.goto(f"/router/ui/{path}")
    expect(ui.page.locator("main h1")).to_have_text(title)
    expect(ui.page.locator(f"main {ready}").first).to_be_visible()
    expect(ui.page.locator("#connection")).to_have_text("connected")


def serious(results: Any) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("path", list(PAGES))
def test_axe_finds_no_serious_violation(ui: GuardedPage, path: str, theme: str) -> None:
    ui.router.post("/router/v1/load", {"model": "alpha"})  # a busy page has more to check
    ui.page.emulate_media(color_scheme=theme)
    open_page(ui, path)
    problems = serious(AXE.run(ui.page))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", list(PAGES))
def test_first_load_makes_a_bounded_number_of_api_calls(ui: GuardedPage, path: str) -> None:
    open_page(ui, path)
    ui.page.wait_for_timeout(1000)  # anything late would show up here
    calls = sorted(p.removeprefix("/router/v1") for _, p in ui.calls())
    assert calls == sorted(PAGES[path][2])


def test_a_hidden_tab_polls_nothing_and_resyncs_when_shown(ui: GuardedPage) -> None:
    open_page(ui, "overview")
    set_visibility = (
        "(state) => { Object.defineProperty(document, 'visibilityState', "
        "{value: state, configurable: true}); document.dispatchEvent(new Event('visibilitychange')); }"
    )
    ui.page.evaluate(set_visibility, "hidden")
    expect(ui.page.locator("#connection")).to_have_text("disconnected")
    before = len(ui.calls())
    ui.page.wait_for_timeout(6500)  # longer than the Overview's 5 s refresh
    assert ui.calls()[before:] == []
    ui.router.post("/router/v1/load", {"model": "alpha"})
    ui.page.evaluate(set_visibility, "visible")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    expect(ui.page.locator("main table").first).to_contain_text("alpha")


def tab_to(ui: GuardedPage, target: Locator, limit: int = 80) -> None:
    for _ in range(limit):
        if target.evaluate("(el) => el === document.activeElement"):
            return
        ui.page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {target}")


def test_keyboard_only_load_confirm_unload(ui: GuardedPage) -> None:
    ui.goto("/router/ui/models?q=alpha")
    row = ui.page.locator('table tbody tr[data-key="alpha"]')
    tab_to(ui, row.get_by_role("button", name="Load"))
    ui.page.keyboard.press("Enter")
    expect(row.locator("td").nth(2)).to_have_text("ready")
    assert ui.router.runtime_states() == {"alpha": "ready"}

    tab_to(ui, ui.page.get_by_role("navigation").get_by_role("link", name="Overview"))
    ui.page.keyboard.press("Enter")
    expect(ui.page.locator("main h1")).to_have_text("Overview")
    unload = ui.page.locator("main table").first.get_by_role("button", name="Unload")
    tab_to(ui, unload)
    ui.page.keyboard.press("Enter")
    dialog = ui.page.get_by_role("dialog", name="Unload alpha?")
    expect(dialog).to_be_visible()
    ui.page.keyboard.press("Escape")  # Esc closes it and nothing happens
    expect(dialog).to_have_count(0)
    expect(unload).to_be_focused()
    assert ui.router.runtime_states() == {"alpha": "ready"}
    ui.page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Unload")).to_be_focused()
    ui.page.keyboard.press("Enter")
    wait_until(lambda: ui.router.runtime_states() == {}, "alpha unloaded by the keyboard")


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("path", ["overview", "models", "config?id=alpha", "nodes", "lending"])
def test_no_horizontal_scroll(ui: GuardedPage, path: str, width: int) -> None:
    ui.page.set_viewport_size({"width": width, "height": 800})
    ui.router.post("/router/v1/load", {"model": "alpha"})
    open_page(ui, path)
    overflow = ui.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{path} at {width} px scrolls sideways by {overflow} px"
    # Every visible action button can be reached without scrolling sideways. One snapshot of
    # every button's box (live events may re-render rows between two separate reads).
    boxes = ui.page.evaluate(
        """[...document.querySelectorAll('main button')]
             .map(b => [b.innerText, b.getBoundingClientRect()])
             .filter(([, r]) => r.width > 0 && r.height > 0)
             .map(([t, r]) => [t, r.left, r.right])"""
    )
    for text, left, right in boxes:
        assert left >= 0 and right <= width, f"{text} is outside the {width} px viewport"


def test_the_axe_check_sees_a_planted_violation(ui: GuardedPage) -> None:
    open_page(ui, "nodes")
    ui.page.evaluate("document.querySelector('main').append(document.createElement('button'))")
    assert any(p.startswith("button-name") for p in serious(AXE.run(ui.page)))
