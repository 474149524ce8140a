"""W4-W7 on the Overview: live progress, a crash's exit code and tail, resync after going
offline, Unload behind a confirm dialog (the router's answers checked over HTTP)."""

from __future__ import annotations

import threading
import time

from playwright.sync_api import expect

from tests.ui.conftest import GuardedPage, UiRouter, wait_until


def lane_row(ui: GuardedPage, lane: str):  # type: ignore[no-untyped-def]
    return ui.page.locator("main table").first.locator(
        "tbody tr", has=ui.page.locator(f'th:text-is("{lane}")')
    )


def load_in_background(router: UiRouter, model: str) -> threading.Thread:
    """POST /router/v1/load answers when the load ends; the browser must see it before."""
    thread = threading.Thread(
        target=lambda: router.http.post("/router/v1/load", json={"model": model}), daemon=True
    )
    thread.start()
    return thread


def test_a_load_started_over_the_api_shows_live_progress_then_ready(ui: GuardedPage) -> None:
    ui.goto("/router/ui/overview")
    expect(lane_row(ui, "text")).to_contain_text("empty")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    thread = load_in_background(ui.router, "slowpoke")  # a 4 s load
    row = lane_row(ui, "text")
    bar = row.get_by_role("progressbar", name="Loading slowpoke")
    expect(bar).to_be_visible(timeout=3_000)
    expect(row).to_contain_text("loading")
    first = row.locator("[data-elapsed-since]").inner_text()
    expect(row.locator("[data-elapsed-since]")).not_to_have_text(first)  # the clock runs
    # Where the stream reports percentages the bar is determinate and never goes back.
    read = (
        "() => { const el = document.querySelector('progress[aria-label=\"Loading slowpoke\"]');"
        " return el ? [el.hasAttribute('value') ? el.value : null] : null; }"
    )
    values: list[float] = []
    end = time.monotonic() + 30
    while (sample := ui.page.evaluate(read)) is not None and time.monotonic() < end:
        if sample[0] is not None:
            values.append(sample[0])
        ui.page.wait_for_timeout(150)
    assert values == sorted(values), values
    expect(row).to_contain_text("ready", timeout=20_000)
    expect(bar).to_have_count(0)
    expect(row.locator("td").nth(5)).not_to_have_text("—")  # the PID came with the snapshot
    thread.join(30)
    assert ui.router.runtime_states() == {"slowpoke": "ready"}
    ui.shot("overview-ready")


def test_a_crashing_backend_shows_its_exit_code_and_output_tail(ui: GuardedPage) -> None:
    ui.goto("/router/ui/overview")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    ui.router.http.post("/router/v1/load", json={"model": "crashy"})  # answers 502 after the crash
    alert = lane_row(ui, "text").get_by_role("alert")
    expect(alert).to_contain_text("Load of crashy failed")
    expect(alert).to_contain_text("exit code 3")
    expect(alert.locator("pre")).to_contain_text("failed to load model")
    failures = ui.page.get_by_role("table", name="The newest load errors of this node")
    expect(failures.locator("tbody tr").first).to_contain_text("crashy")
    expect(failures.locator("tbody tr").first).to_contain_text("3")


def test_unload_all_asks_first_and_stops_every_runtime(ui: GuardedPage) -> None:
    ui.router.post("/router/v1/load", {"model": "alpha"})
    ui.goto("/router/ui/overview")
    expect(lane_row(ui, "text")).to_contain_text("ready")
    opener = ui.page.get_by_role("button", name="Unload all")
    opener.click()
    dialog = ui.page.get_by_role("dialog", name="Unload every model?")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    expect(opener).to_be_focused()  # focus goes back to what opened the dialog
    assert ui.router.runtime_states() == {"alpha": "ready"}
    opener.click()
    ui.page.get_by_role("dialog").get_by_role("button", name="Unload all").click()
    expect(lane_row(ui, "text")).to_contain_text("empty")
    wait_until(lambda: ui.router.runtime_states() == {}, "alpha unloaded")


def test_offline_then_online_resyncs_without_stale_or_duplicate_rows(ui: GuardedPage) -> None:
    ui.router.post("/router/v1/load", {"model": "alpha"})
    ui.goto("/router/ui/overview")
    expect(lane_row(ui, "text")).to_contain_text("alpha")
    ui.page.context.set_offline(True)
    expect(ui.page.locator("#connection")).to_have_text("disconnected")
    assert "(disconnected)" in ui.page.title()
    # Meanwhile the text lane swaps to another model, unseen by the browser.
    ui.router.post("/router/v1/load", {"model": "beta"})
    ui.page.context.set_offline(False)
    expect(ui.page.locator("#connection")).to_have_text("connected", timeout=20_000)
    row = lane_row(ui, "text")
    expect(row).to_contain_text("beta")
    expect(row).to_have_count(1)
    expect(ui.page.locator("main table").first).not_to_contain_text("alpha")
    assert ui.router.runtime_states() == {"beta": "ready"}
