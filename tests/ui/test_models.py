"""W7/W8 on the Models page: row actions change what the router says (checked over HTTP), and
200 configurations stay usable (search, numeric-aware sort, URL state, back and forward)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Locator, expect

from tests.ui.conftest import BULK_MODELS, GuardedPage, wait_until


def model_row(ui: GuardedPage, model: str) -> Locator:
    return ui.page.locator(f'table tbody tr[data-key="{model}"]')


def first_column(ui: GuardedPage) -> list[str]:
    return ui.page.locator("table tbody tr th").all_inner_texts()


def query(ui: GuardedPage) -> dict[str, list[str]]:
    return parse_qs(urlsplit(ui.page.url).query)


def test_load_unload_disable_enable_from_the_ui(ui: GuardedPage) -> None:
    ui.goto("/router/ui/models?q=alpha")
    row = model_row(ui, "alpha")
    row.get_by_role("button", name="Load").click()
    expect(row.locator("td").nth(2)).to_have_text("ready")
    assert ui.router.runtime_states() == {"alpha": "ready"}
    row.get_by_role("button", name="Unload").click()
    expect(row.locator("td").nth(2)).to_have_text("unloaded")
    wait_until(lambda: ui.router.runtime_states() == {}, "alpha unloaded")

    assert "alpha" in ui.router.openai_ids()
    row.get_by_role("button", name="Disable").click()
    expect(row.locator("td").nth(2)).to_have_text("disabled")
    expect(row.get_by_role("button", name="Enable")).to_be_visible()
    assert "alpha" not in ui.router.openai_ids()
    chat = ui.router.http.post("/v1/chat/completions", json={"model": "alpha", "messages": []})
    assert chat.status_code == 404  # a disabled model is as unknown as a missing one
    row.get_by_role("button", name="Enable").click()
    expect(row.locator("td").nth(2)).to_have_text("unloaded")
    assert "alpha" in ui.router.openai_ids()


def test_a_load_started_elsewhere_shows_up_live(ui: GuardedPage) -> None:
    ui.goto("/router/ui/models?q=beta")
    expect(model_row(ui, "beta").locator("td").nth(2)).to_have_text("unloaded")
    ui.router.post("/router/v1/load", {"model": "beta"})
    expect(model_row(ui, "beta").locator("td").nth(2)).to_have_text("ready")


def test_two_hundred_models_search_sort_filter_and_history(ui: GuardedPage) -> None:
    ui.goto("/router/ui/models")
    expect(ui.page.locator("table tbody tr")).to_have_count(BULK_MODELS)
    expect(ui.page.get_by_role("status").filter(has_text="configurations")).to_have_text(
        f"{BULK_MODELS} of {BULK_MODELS} configurations"
    )
    search = ui.page.get_by_label("Search")
    search.fill("chat-q")
    search.press("Enter")
    expect(ui.page.locator("table tbody tr")).to_have_count(3)
    assert first_column(ui) == ["chat-q2", "chat-q4", "chat-q10"]  # numeric-aware
    header = ui.page.get_by_role("columnheader", name="Model")
    expect(header).to_have_attribute("aria-sort", "ascending")
    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "descending")
    assert first_column(ui) == ["chat-q10", "chat-q4", "chat-q2"]
    assert query(ui) == {"q": ["chat-q"], "sort": ["id"], "dir": ["desc"]}

    ui.page.reload()  # the URL alone restores the view
    expect(ui.page.locator("table tbody tr")).to_have_count(3)
    assert first_column(ui) == ["chat-q10", "chat-q4", "chat-q2"]
    expect(ui.page.get_by_label("Search")).to_have_value("chat-q")

    ui.page.go_back()  # before the sort
    expect(ui.page.get_by_role("columnheader", name="Model")).to_have_attribute(
        "aria-sort", "ascending"
    )
    assert first_column(ui) == ["chat-q2", "chat-q4", "chat-q10"]
    ui.page.go_back()  # before the search
    expect(ui.page.locator("table tbody tr")).to_have_count(BULK_MODELS)
    ui.page.go_forward()
    expect(ui.page.locator("table tbody tr")).to_have_count(3)


def test_state_filter_follows_live_state(ui: GuardedPage) -> None:
    ui.router.post("/router/v1/load", {"model": "chat-q4"})
    ui.goto("/router/ui/models?state=ready")
    expect(ui.page.locator("table tbody tr")).to_have_count(1)
    expect(model_row(ui, "chat-q4")).to_be_visible()
    expect(ui.page.get_by_label("State")).to_have_value("ready")
    ui.page.get_by_label("State").select_option("")
    expect(ui.page.locator("table tbody tr")).to_have_count(BULK_MODELS)
    assert "state" not in query(ui)


def test_detail_shows_the_sanitized_kcpps_and_file_hashes(ui: GuardedPage) -> None:
    ui.goto("/router/ui/models?q=beta")
    model_row(ui, "beta").get_by_role("link", name="beta").click()
    detail = ui.page.get_by_role("region", name="Configuration beta")
    kcpps = detail.get_by_label("Sanitized beta.kcpps")
    expect(kcpps).to_contain_text('"model_param": "beta.gguf"')  # no directory shown
    expect(kcpps).not_to_contain_text(str(ui.router.harness.models_dir))
    files = detail.get_by_role("table", name="Files of beta")
    expect(files).to_contain_text("model_param")
    expect(files).to_contain_text(
        "b83633aa785344791618f2fddf131b010ea04912a60430760b070bad293f65bd"
    )
    assert query(ui)["model"] == ["beta"]
    ui.page.reload()
    expect(ui.page.get_by_role("region", name="Configuration beta")).to_be_visible()
