"""W12 (benchmarks): a run started from the page against the fake backend shows its progress
(benchmark_* events on the shared stream) and its result beside the model's history, and
what the page shows is what GET /router/v1/benchmarks stores."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.ui.conftest import GuardedPage, UiRouter
from tests.ui.data_router import page_calls


def test_a_run_from_the_page_shows_progress_result_and_history(
    ui_router: UiRouter, ui: GuardedPage
) -> None:
    # ui_router first: it starts the router with asyncio.run before Playwright's loop exists.
    before = ui_router.get("/router/v1/benchmarks", params={"model_id": "alpha"})["history"]
    ui.goto("/router/ui/benchmarks?model=alpha")
    expect(ui.page.locator("main h1")).to_have_text("Benchmarks")
    expect(ui.page.get_by_label("Model")).to_have_value("alpha")
    history = ui.page.get_by_role("table", name="Past runs, newest first")
    expect(history.locator("tbody tr")).to_have_count(max(1, len(before)))
    assert sorted(page_calls(ui)) == [
        ("GET", "/router/v1/benchmarks"),
        ("GET", "/router/v1/models"),
    ]

    ui.page.get_by_label("Text generation").check()
    ui.page.get_by_label("Runtime (unload, then load)").check()
    expect(ui.page.get_by_label("Only these sections:")).to_be_checked()
    with ui.page.expect_request("**/router/v1/benchmarks/run") as run_request:
        ui.page.get_by_role("button", name="Run benchmark").click()
    assert run_request.value.post_data_json == {
        "model_id": "alpha",
        "type": "section",
        "iterations": 1,
        "sections": ["runtime", "llm"],
    }
    expect(ui.page.get_by_role("button", name="Running…")).to_be_disabled()

    result = ui.page.get_by_role("table", name="Sections of this run")
    expect(result).to_be_visible(timeout=60_000)
    expect(ui.page.get_by_role("button", name="Run benchmark")).to_be_enabled()
    stored = ui_router.get("/router/v1/benchmarks", params={"model_id": "alpha"})
    latest = stored["latest"]
    assert latest["status"] == "success", latest
    expect(ui.page.locator("main")).to_contain_text(f"Run {latest['run_id']}")
    for section in ("runtime", "llm"):
        expect(result.locator("tbody tr").filter(has_text=section)).to_contain_text("success")
    expect(result).to_contain_text("model_load_ms")
    expect(result).to_contain_text("tokens_per_second")

    # The progress seen through the events reached every section, then the end.
    progress = ui.page.get_by_role("progressbar", name="Benchmark of alpha")
    expect(progress).to_have_attribute("value", "1")
    expect(ui.page.get_by_role("region", name="Current run")).to_contain_text("Finished")
    expect(history.locator("tbody tr")).to_have_count(len(before) + 1)
    expect(history.locator("tbody tr").first).to_contain_text("success")


def test_a_refused_run_is_explained_next_to_the_form(ui_router: UiRouter, ui: GuardedPage) -> None:
    ui.goto("/router/ui/benchmarks?model=alpha")
    ui.page.get_by_label("Only these sections:").check()
    ui.page.get_by_role("button", name="Run benchmark").click()
    expect(ui.page.get_by_role("alert")).to_contain_text("tick at least one section")
    # A choice the router refuses comes back in its own words (400 from the route).
    ui.allow(r"^/router/v1/benchmarks/run$", 400)
    ui.page.get_by_label("Iterations").fill("99")
    ui.page.get_by_label("Music").check()
    ui.page.get_by_role("button", name="Run benchmark").click()
    expect(ui.page.get_by_role("alert")).to_contain_text("iterations must be between 1 and 20")


def test_the_form_choices_are_in_the_url_and_a_reload_restores_them(
    ui_router: UiRouter, ui: GuardedPage
) -> None:
    ui.goto("/router/ui/benchmarks?model=alpha")
    ui.page.get_by_label("Embeddings").check()
    ui.page.get_by_label("Runtime (unload, then load)").check()
    ui.page.get_by_label("Iterations").fill("3")
    ui.page.get_by_label("Iterations").blur()
    expect(ui.page).to_have_url(re.compile(r"type=section&sections=runtime%2Cembed&iterations=3"))
    ui.page.reload()
    expect(ui.page.get_by_label("Only these sections:")).to_be_checked()
    expect(ui.page.get_by_label("Embeddings")).to_be_checked()
    expect(ui.page.get_by_label("Runtime (unload, then load)")).to_be_checked()
    expect(ui.page.get_by_label("Text generation")).not_to_be_checked()
    expect(ui.page.get_by_label("Iterations")).to_have_value("3")
    expect(ui.page.get_by_label("Model")).to_have_value("alpha")
