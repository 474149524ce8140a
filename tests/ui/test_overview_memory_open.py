"""The Overview's memory while runtimes are resident (issue 36): the bars show their bytes from
the first render, not "0 B used" (the stream's opening `state` events carry no memory and used
to replace the status records), and the status keeps being reread while `activity` events flow
(no event carries memory; the reread used to stop at the first one). A real headless browser,
two resident runtimes of demo GGUFs on the fake backend (tests/ui/memory_router.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Request, expect

from tests.support.harness import RouterHarness, chat
from tests.support.router_process import RouterProcess
from tests.ui.conftest import GuardedPage, UiRouter, guarded, serving, wait_until
from tests.ui.memory_router import CHAT, EMBED, seed_demo_models


@pytest.fixture(scope="module")
def gated_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UiRouter, Path]]:
    """bars_router's models and budget; CHAT answers once the gate file exists, so a chat is
    in flight for as long as a test needs (its `activity` event reaches the page)."""
    tmp = tmp_path_factory.mktemp("ui-memory-open")
    h = RouterHarness(tmp)
    seed_demo_models(h)
    gate = tmp / "gate"
    h.faults_for_model[CHAT] = f"--gate {gate}"
    with serving(RouterProcess(h, extra={"memory": {"host_budget": "128MiB"}}), h) as router:
        yield router, gate


@pytest.fixture
def memory_ui(
    page: Page, gated_router: tuple[UiRouter, Path], tmp_path: Path
) -> Iterator[GuardedPage]:
    yield from guarded(page, gated_router[0], tmp_path)


# Every aria-label the host bar has had, from before the page's own scripts run.
LABELS = """
window.barLabels = [];
new MutationObserver(() => {
  const bar = document.querySelector('svg.mem-bar[data-device="host"]');
  const label = bar && bar.getAttribute('aria-label');
  if (label && window.barLabels[window.barLabels.length - 1] !== label) window.barLabels.push(label);
}).observe(document, { subtree: true, childList: true, attributes: true });
"""


def resident(router: UiRouter) -> int:
    """Both models loaded and measured; their bytes."""
    for model in (CHAT, EMBED):
        router.post("/router/v1/load", {"model": model})

    def measured() -> bool:
        runtimes = router.get("/router/v1/status")["runtimes"]
        return len(runtimes) == 2 and all(rt["memory"]["source"] == "measured" for rt in runtimes)

    wait_until(measured, "both runtimes measured", 60)
    return sum(rt["memory"]["bytes"] for rt in router.get("/router/v1/status")["runtimes"])


def is_status(request: Request) -> bool:
    return request.url.endswith("/router/v1/status")


def test_the_overview_shows_resident_memory_from_its_first_render(memory_ui: GuardedPage) -> None:
    ui = memory_ui
    resident(ui.router)
    ui.page.add_init_script(LABELS)
    ui.goto("/router/ui/overview")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    host = ui.page.locator('svg.mem-bar[data-device="host"]')
    expect(host.locator("g.mem-seg")).to_have_count(2)
    # The next reread comes 5 s after the first: the opening events were applied long before.
    with ui.page.expect_request(is_status, timeout=20_000):
        pass
    expect(host.locator("g.mem-seg")).to_have_count(2)
    labels = ui.page.evaluate("window.barLabels")
    assert labels, "the host bar was never drawn"
    assert not [label for label in labels if label.startswith("host memory: 0 B used")], labels
    ui.shot("overview-memory-open")


def test_the_status_is_reread_while_activity_events_flow(
    memory_ui: GuardedPage, gated_router: tuple[UiRouter, Path]
) -> None:
    ui, gate = memory_ui, gated_router[1]
    resident(ui.router)
    ui.goto("/router/ui/overview")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    expect(ui.page.locator('svg.mem-bar[data-device="host"] g.mem-seg')).to_have_count(2)
    answers: list[int] = []
    held = threading.Thread(
        target=lambda: answers.append(
            ui.router.http.post("/v1/chat/completions", json=chat(CHAT), timeout=60).status_code
        ),
        daemon=True,
    )
    held.start()
    try:  # the page shows the chat in flight: an `activity` event reached it
        text_row = ui.page.get_by_role("row").filter(has_text=CHAT)
        expect(text_row.get_by_role("cell").nth(3)).to_have_text("1")
    finally:
        gate.touch()
        held.join(60)
    assert answers == [200]
    # Two rereads after it: the first may have been due before the page saw the event.
    for _ in range(2):
        with ui.page.expect_request(is_status, timeout=20_000):
            pass
