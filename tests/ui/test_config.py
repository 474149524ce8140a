"""W13: the Config editor. The router's parser judges every edit (preview); refused keys show
as stripped; a diff comes before the save; a save reaches the catalog without a reload."""

from __future__ import annotations

import json

from playwright.sync_api import expect

from tests.ui.conftest import GuardedPage, wait_until


def editor_text(ui: GuardedPage) -> dict[str, object]:
    return json.loads(ui.page.get_by_label("Options (.kcpps JSON)").input_value())


def test_an_invalid_edit_is_refused_and_nothing_is_written(ui: GuardedPage) -> None:
    path = ui.router.harness.kcpps_dir / "beta.kcpps"
    before = path.read_bytes()
    ui.goto("/router/ui/config?id=beta")
    text = ui.page.get_by_label("Options (.kcpps JSON)")
    expect(text).to_have_value(json.dumps(json.loads(before), indent=2))
    save = ui.page.get_by_role("button", name="Save")
    # Not JSON: the page says so and asks the router nothing.
    text.fill("{ not json")
    ui.page.get_by_role("button", name="Check").click()
    expect(ui.page.get_by_role("alert")).to_contain_text("not JSON")
    expect(save).to_be_disabled()
    # JSON the router's parser refuses: its own error, next to the editor; Save stays off.
    text.fill(json.dumps({"backend_mode": "nonsense", "model_param": "beta.gguf"}))
    ui.page.get_by_role("button", name="Check").click()
    findings = ui.page.get_by_role("list", name="What the router says")
    expect(findings.locator('li[data-code="invalid_config"]')).to_be_visible()
    expect(save).to_be_disabled()
    assert path.read_bytes() == before


def test_a_valid_edit_shows_stripped_keys_and_a_diff_then_saves(ui: GuardedPage) -> None:
    path = ui.router.harness.kcpps_dir / "chat-q2.kcpps"
    original = path.read_bytes()
    try:
        ui.goto("/router/ui/config?id=chat-q2")
        options = {**editor_text(ui), "contextsize": 2048, "onready": "curl evil", "port": 1}
        ui.page.get_by_label("Options (.kcpps JSON)").fill(json.dumps(options))
        ui.page.get_by_role("button", name="Check").click()
        findings = ui.page.get_by_role("list", name="What the router says")
        expect(findings.locator('li[data-code="refused_key"]')).to_contain_text("stripped")
        expect(findings.locator('li[data-code="refused_key"]')).to_contain_text("onready")
        expect(findings.locator('li[data-code="router_owned_key"]')).to_contain_text("port")
        diff = ui.page.get_by_label("Changes to be written")
        expect(diff.locator(".add")).to_contain_text('"contextsize": 2048')
        expect(diff).not_to_contain_text("onready")
        ui.page.get_by_role("button", name="Save").click()
        ui.page.get_by_role("dialog").get_by_role("button", name="Save").click()
        expect(ui.page.get_by_role("status").filter(has_text="Saved")).to_have_text(
            "Saved chat-q2.kcpps."
        )
        written = json.loads(path.read_text())
        assert written["contextsize"] == 2048 and "onready" not in written and "port" not in written
    finally:
        path.write_bytes(original)


def test_a_new_configuration_appears_in_the_catalog_without_a_reload(ui: GuardedPage) -> None:
    h = ui.router.harness
    (h.models_dir / "fresh.gguf").write_bytes(b"GGUF")
    target = h.kcpps_dir / "fresh.kcpps"
    try:
        ui.goto("/router/ui/config")
        ui.page.evaluate("window.__sameDocument = true")
        ui.page.get_by_role("link", name="New configuration").click()
        ui.page.get_by_label("Configuration id").fill("fresh")
        options = {"backend_mode": "llama_sdcpp", "model_param": str(h.models_dir / "fresh.gguf")}
        ui.page.get_by_label("Options (.kcpps JSON)").fill(json.dumps(options))
        ui.page.get_by_role("button", name="Check").click()
        ui.page.get_by_role("button", name="Save").click()
        ui.page.get_by_role("dialog").get_by_role("button", name="Save").click()
        files = ui.page.get_by_role("table", name="Files the catalog serves")
        expect(files.get_by_role("link", name="fresh.kcpps")).to_be_visible(timeout=20_000)
        assert ui.page.evaluate("window.__sameDocument") is True
        wait_until(lambda: "fresh" in ui.router.openai_ids(), "fresh in /v1/models")
    finally:
        target.unlink(missing_ok=True)
        wait_until(lambda: "fresh" not in ui.router.openai_ids(), "fresh gone again")
