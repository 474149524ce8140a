"""W9: the Analytics page shows the numbers the API gives, from ONE aggregate call per range.

The store holds known traffic (tests/ui/data_router.py): the page's totals, per-model rows,
chart bars and bucket table are compared with the answer to the very query the page sent,
and the seeded errors per model are checked against the rows we wrote.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from playwright.sync_api import Page, expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage
from tests.ui.data_router import DataRouter, page_calls

data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui

ANALYTICS = "/router/v1/site/analytics"


def _count(n: int) -> str:
    return f"{n:,}"


def _open(ui: GuardedPage, path: str) -> dict[str, str]:
    """Load a page and return the query of its analytics call."""
    with ui.page.expect_request(lambda r: urlsplit(r.url).path == ANALYTICS) as request:
        ui.goto(path)
    expect(ui.page.locator("main h1")).to_have_text("Analytics")
    expect(ui.page.locator("[data-stat=requests] dd")).to_be_visible()
    return dict(parse_qsl(urlsplit(request.value.url).query))


def _model_rows(page: Page) -> dict[str, list[str]]:
    table = page.get_by_role("region", name="Per model").get_by_role("table")
    rows = table.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    return {row[0]: row[1:] for row in rows}


def _assert_same_numbers(page: Page, answer: dict) -> None:
    totals = answer["totals"]
    expect(page.locator("[data-stat=requests] dd")).to_have_text(_count(totals["requests"]))
    expect(page.locator("[data-stat=errors] dd")).to_contain_text(_count(totals["errors"]))
    expect(page.locator("[data-stat=aborted] dd")).to_have_text(_count(totals["aborted"]))
    shown = _model_rows(page)
    assert set(shown) == {m["model"] for m in answer["models"]}
    for model in answer["models"]:
        requests, errors, aborted, *_rest, tokens = shown[model["model"]]
        assert requests == _count(model["requests"]), model["model"]
        assert errors == _count(model["errors"]), model["model"]
        assert aborted == _count(model["aborted"]), model["model"]
        assert tokens == _count(model["tokens"]["total"]), model["model"]


def test_numbers_equal_the_api_and_each_range_is_one_call(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ui = data_ui
    query = _open(ui, "/router/ui/analytics")
    answer = data_ui_router.get(ANALYTICS, params=query)
    assert answer["totals"]["requests"] == 12 + 5 + 4  # the last 24 h of the seeded traffic
    _assert_same_numbers(ui.page, answer)
    by_model = {m["model"]: m for m in answer["models"]}
    assert by_model["alpha"]["errors"] == 2 and by_model["beta"]["aborted"] == 1
    assert _model_rows(ui.page)["beta"][1] == "0", "a client that went away is no error"
    # The chart draws one bar per bucket of the answer, and has a name.
    chart = ui.page.get_by_role(
        "img", name=re.compile(r"^Requests and errors per .*, last 24 hours$")
    )
    expect(chart.locator(".chart-bar")).to_have_count(len(answer["buckets"]))
    assert page_calls(ui) == [("GET", ANALYTICS)]

    # Another range: exactly one more call, and the numbers follow.
    with ui.page.expect_request(lambda r: urlsplit(r.url).path == ANALYTICS) as request:
        ui.page.get_by_role("button", name="Last 30 days").click()
    expect(ui.page.get_by_role("button", name="Last 30 days")).to_have_attribute(
        "aria-pressed", "true"
    )
    month = data_ui_router.get(ANALYTICS, params=dict(parse_qsl(urlsplit(request.value.url).query)))
    assert month["totals"]["requests"] == 12 + 5 + 4 + 12
    _assert_same_numbers(ui.page, month)
    assert {m["model"]: m["errors"] for m in month["models"]}["beta"] == 6
    assert page_calls(ui) == [("GET", ANALYTICS)] * 2
    assert "range=30d" in ui.page.url


def test_show_as_table_lists_every_bucket_and_survives_a_reload(
    data_ui: GuardedPage, data_ui_router: DataRouter
) -> None:
    ui = data_ui
    query = _open(ui, "/router/ui/analytics?range=7d")
    answer = data_ui_router.get(ANALYTICS, params=query)
    ui.page.get_by_role("button", name="Show as table").click()
    table = ui.page.get_by_role("table", name="Requests per time bucket")
    expect(table.locator("tbody tr")).to_have_count(len(answer["buckets"]))
    counts = table.locator("tbody tr td:nth-child(2)").all_text_contents()
    assert counts == [_count(b["requests"]) for b in answer["buckets"]]
    assert "view=table" in ui.page.url
    ui.page.reload()
    expect(ui.page.get_by_role("table", name="Requests per time bucket")).to_be_visible()
    expect(ui.page.get_by_role("button", name="Show as table")).to_have_attribute(
        "aria-pressed", "true"
    )


def test_flush_and_download_the_store(data_ui: GuardedPage) -> None:
    ui = data_ui
    _open(ui, "/router/ui/analytics?range=1h")
    ui.page.get_by_role("button", name="Flush to disk").click()
    expect(ui.page.get_by_role("status").filter(has_text="Flushed")).to_contain_text("ui-data-node")
    with ui.page.expect_download() as download:
        ui.page.get_by_role("link", name="Download the store").click()
    assert download.value.suggested_filename.startswith("analytics-ui-data-node-")
    path = download.value.path()
    assert path.read_bytes()[:16] == b"SQLite format 3\x00"


def test_an_api_error_is_shown_in_words_next_to_the_range(data_ui: GuardedPage) -> None:
    ui = data_ui
    ui.allow(rf"^{ANALYTICS}$", 400)
    # A range the router does not know is refused; the page says why, in the router's words.
    ui.page.route(
        "**/router/v1/site/analytics?*",
        lambda route: route.continue_(url=re.sub(r"range=\w+", "range=2h", route.request.url)),
    )
    ui.goto("/router/ui/analytics")
    expect(ui.page.get_by_role("alert")).to_contain_text("range must be one of")
    expect(ui.page.locator("main h1")).to_have_text("Analytics")
