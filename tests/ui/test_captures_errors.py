"""W10/W11: the Load captures and Load errors pages over a seeded store (tests/ui/data_router.py).

Captures: the list and its filters from the URL, cursor paging, the detail with the sanitized
snapshot and hashes, the console paged by `after_sequence` in stored order, ANSI as classes,
an `<img onerror>` line shown as text, the truncated mark. Load errors: the list, filters,
sort, and Clear all behind the confirm dialog (the count shown equals the DELETE answer).
"""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage
from tests.ui.data_router import EXTRA_CAPTURES, PAGED_LINES, XSS_LINE, DataRouter, page_calls

data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui


def _open_capture(ui: GuardedPage, attempt: str) -> None:
    ui.goto(f"/router/ui/captures?attempt={attempt}")
    expect(ui.page.locator("main h1")).to_have_text("Load capture")
    expect(ui.page.locator("pre.console .out").first).to_be_visible()


def test_capture_list_pages_with_the_cursor_and_filters_from_the_url(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ui = data_ui
    ui.goto("/router/ui/captures")
    expect(ui.page.locator("main h1")).to_have_text("Load captures")
    rows = ui.page.locator("main table tbody tr")
    expect(rows).to_have_count(50)
    assert page_calls(ui) == [("GET", "/router/v1/site/load-captures")], (
        "one call for the first page"
    )
    ui.page.get_by_role("button", name="Older captures").click()
    expect(rows).to_have_count(EXTRA_CAPTURES + 2)
    expect(ui.page.get_by_role("button", name="Older captures")).to_have_count(0)

    # A filter goes into the URL, and a reload of that URL shows the same rows.
    ui.page.get_by_label("Status").select_option("failed")
    expect(rows).to_have_count(1)
    assert "status=failed" in ui.page.url
    ui.page.reload()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("beta")
    expect(rows.first).to_contain_text("truncated")
    expect(ui.page.get_by_label("Status")).to_have_value("failed")


def test_capture_detail_shows_sanitized_snapshot_hashes_and_argv(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ui = data_ui
    _open_capture(ui, data_ui_router.ids["paged"])
    main = ui.page.locator("main")
    expect(main.get_by_role("table").filter(has_text="SHA-256")).to_contain_text("ab" * 32)
    snapshot = main.get_by_role("table").filter(has_text="contextsize")
    expect(snapshot).to_contain_text("alpha.gguf")
    expect(snapshot).not_to_contain_text("/home/op")
    expect(snapshot).not_to_contain_text("hunter2")
    expect(main.get_by_label("Command line")).to_contain_text("[redacted]")
    expect(main.get_by_label("Command line")).not_to_contain_text("sk-secret")
    calls = page_calls(ui)
    assert len(calls) == 2, calls  # the detail and the first output page, nothing per row


def test_console_pages_by_after_sequence_keeps_order_colours_and_shows_html_as_text(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ui = data_ui
    attempt = data_ui_router.ids["paged"]
    first = data_ui_router.output_page(attempt)
    assert first["more"] and len(first["chunks"]) == 200
    _open_capture(ui, attempt)
    lines = ui.page.locator("pre.console .out")
    expect(lines).to_have_count(200)
    with ui.page.expect_request(re.compile(r"/output\?.*after_sequence=200")) as request:
        ui.page.get_by_role("button", name="Load more output").click()
    assert "after_sequence=200" in request.value.url
    expect(lines).to_have_count(PAGED_LINES)
    expect(ui.page.get_by_role("button", name="Load more output")).to_have_count(0)

    # Every chunk in the stored order, on its stream.
    second = data_ui_router.output_page(attempt, first["next_after_sequence"])
    stored = first["chunks"] + second["chunks"]
    shown = lines.evaluate_all(
        "els => els.map(e => [Number(e.dataset.sequence), e.dataset.stream])"
    )
    assert shown == [[c["sequence"], c["stream"]] for c in stored]

    # ANSI: classes on spans, the escape bytes gone; no inline style anywhere.
    green = ui.page.locator("pre.console .ansi-fg-2")
    expect(green).to_have_text("loading model")
    expect(
        ui.page.locator("pre.console .ansi-fg-9.ansi-bold, pre.console .ansi-fg-1.ansi-bold")
    ).to_have_text("low memory")
    expect(lines.first).to_have_text("loading model plain after")
    assert ui.page.locator("pre.console [style]").count() == 0
    assert "\x1b" not in ui.page.locator("pre.console").inner_text()

    # HTML in the output is text: no <img> element, the characters on screen, no script ran.
    expect(ui.page.locator("pre.console img")).to_have_count(0)
    expect(ui.page.locator("pre.console .out").nth(2)).to_have_text(XSS_LINE)
    assert "pwned" not in ui.page.title()


def test_truncated_capture_shows_the_mark_where_the_cap_was_hit(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ui = data_ui
    attempt = data_ui_router.ids["truncated"]
    page = data_ui_router.output_page(attempt)
    assert page["truncated"] and page["chunks"][-1]["truncated"]
    _open_capture(ui, attempt)
    lines = ui.page.locator("pre.console .out")
    expect(lines).to_have_count(len(page["chunks"]))
    mark = ui.page.locator("pre.console .truncated-mark")
    expect(mark).to_have_count(1)
    expect(mark).to_contain_text("truncated")
    # The mark follows the last stored chunk: where the cap was hit.
    assert (
        ui.page.locator("pre.console > :last-child").evaluate("e => e.className")
        == "truncated-mark"
    )
    expect(ui.page.locator("main")).to_contain_text("exited with code 3")


def test_an_unknown_capture_is_an_error_in_words(data_ui: GuardedPage) -> None:
    ui = data_ui
    ui.allow(r"^/router/v1/site/load-captures/nope(/output)?$", 404)
    ui.goto("/router/ui/captures?attempt=nope")
    expect(ui.page.locator("main h1")).to_have_text("Load capture")
    expect(ui.page.get_by_role("alert")).to_contain_text("nope")
    expect(ui.page.get_by_role("alert")).to_have_count(1)


def test_load_errors_list_filter_sort_and_clear_all_behind_the_confirm(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ui = data_ui
    api_errors = data_ui_router.get("/router/v1/site/load-errors")["errors"]
    assert len(api_errors) == 3
    ui.goto("/router/ui/load-errors?sort=model&dir=asc")
    expect(ui.page.locator("main h1")).to_have_text("Load errors")
    rows = ui.page.locator("main table tbody tr")
    expect(rows).to_have_count(3)
    assert page_calls(ui) == [("GET", "/router/v1/site/load-errors")]
    expect(ui.page.locator("th[aria-sort=ascending]")).to_have_text(re.compile("Model"))
    expect(rows.first).to_contain_text("artist")
    # The failed load links to its capture; the serving failure is shown as such.
    beta_load = rows.filter(has_text="during the load")
    expect(beta_load.get_by_role("link", name="Open capture")).to_have_attribute(
        "href", f"/router/ui/captures?attempt={data_ui_router.ids['truncated']}"
    )
    expect(rows.filter(has_text="while serving")).to_contain_text("serving")
    ui.page.get_by_label("Phase").select_option("serving")
    expect(rows).to_have_count(1)
    assert "phase=serving" in ui.page.url

    # Cancel keeps everything and gives focus back to the button.
    clear = ui.page.get_by_role("button", name="Clear all")
    clear.click()
    dialog = ui.page.get_by_role("dialog")
    expect(dialog).to_contain_text("Clear all load errors?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    expect(clear).to_be_focused()
    assert len(data_ui_router.get("/router/v1/site/load-errors")["errors"]) == 3

    with ui.page.expect_response(lambda r: r.request.method == "DELETE") as deleted:
        clear.click()
        ui.page.get_by_role("dialog").get_by_role("button", name="Clear all").click()
    removed = deleted.value.json()["removed"]
    assert removed == 3
    expect(ui.page.get_by_role("status").filter(has_text="Removed")).to_have_text(
        f"Removed {removed} load errors."
    )
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("No load errors are recorded.")
    assert data_ui_router.get("/router/v1/site/load-errors")["errors"] == []
