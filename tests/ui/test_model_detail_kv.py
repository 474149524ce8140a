"""Issue 26: the KV cache probe's verdict on the model's detail page (docs/swaps.md).

A router of its own whose fake llama-server answers slot save/restore/erase for `kv-chat`
(`--slot-actions`) and not for `no-slots`: loading each runs the real probe through the real
supervisor, the verdict is stored in `kv-cache/probes.json`, and the detail page shows it.
Issue 33: the page also shows the last save and restore of this run, a failed restore as a
warning (it said "On: the probe passed" while every restore failed), and the prompt cache hit
rate (the fake reports cached prompt tokens as llama-server does); and the configuration's saved
conversations (count, bytes, last use, never a prompt) with the Drop button that erases them
and leaves the model loaded (`lib-chat`'s fake also renders chat templates, so the library
saves each conversation).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.support.harness import RouterHarness
from tests.support.router_process import RouterProcess
from tests.ui.conftest import GuardedPage, UiRouter, _require_chromium, serving

MESSAGES = [{"role": "user", "content": "tell me about the river and the mill " * 8}]


@pytest.fixture(scope="module")
def kv_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiRouter]:
    _require_chromium()
    h = RouterHarness(tmp_path_factory.mktemp("ui-kv-router"))
    h.model("kv-chat")
    h.model("no-slots")
    h.model("kv-off", router_kv_persist="off")
    h.model("lib-chat")
    h.faults_for_model["kv-chat"] = "--slot-actions"
    h.faults_for_model["lib-chat"] = "--slot-actions --apply-template"
    with serving(RouterProcess(h, load_timeout=20, no_progress_timeout=10), h) as router:
        yield router


@pytest.fixture
def kv_ui(kv_router: UiRouter, page: Page, tmp_path: Path) -> Iterator[GuardedPage]:
    guarded = GuardedPage(page, kv_router, tmp_path)
    yield guarded
    guarded.check()


def _detail(ui: GuardedPage, model: str) -> Locator:
    ui.goto(f"/router/ui/models?model={model}")
    region = ui.page.get_by_role("region", name=f"Configuration {model}")
    expect(region.get_by_role("heading", name="KV cache persistence")).to_be_visible()
    return region


def test_the_probe_verdict_shows_on_the_detail_page(kv_ui: GuardedPage) -> None:
    ui = kv_ui
    expect(_detail(ui, "kv-chat")).to_contain_text("Not probed yet")
    ui.router.post("/router/v1/load", {"model": "kv-chat"})  # the probe runs inside the load
    probes = json.loads((ui.router.harness.tmp / "data" / "kv-cache" / "probes.json").read_text())
    [verdict] = probes.values()
    assert verdict["passed"] and verdict["same_answer"], verdict
    region = _detail(ui, "kv-chat")
    facts = region.get_by_label("KV cache probe")
    expect(facts).to_contain_text("passed")
    expect(region).to_contain_text("On: the probe passed.")
    cached, total = verdict["cached_tokens"], verdict["prompt_tokens"]
    expect(facts).to_contain_text(f"{cached} of {total} prompt tokens")
    expect(facts).to_contain_text("Same greedy answer")
    ui.shot("model-detail-kv")

    ui.router.post("/router/v1/load", {"model": "no-slots"})  # no slot actions: rejected
    region = _detail(ui, "no-slots")
    facts = region.get_by_label("KV cache probe")
    expect(facts).to_contain_text("rejected")
    expect(facts).to_contain_text("answered 404")
    expect(region).to_contain_text("Off until a probe passes")

    expect(_detail(ui, "kv-off")).to_contain_text("Off (router_kv_persist: off).")


def _chat(ui: GuardedPage) -> dict[str, object]:
    body = {"model": "kv-chat", "messages": MESSAGES, "max_tokens": 2}
    response = ui.router.http.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    usage = response.json()["usage"]
    assert isinstance(usage, dict)
    return usage


def test_the_last_save_and_a_failed_restore_and_the_hit_rate_show(kv_ui: GuardedPage) -> None:
    ui = kv_ui
    ui.router.post("/router/v1/load", {"model": "kv-chat"})  # the probe passes
    first, again = _chat(ui), _chat(ui)  # the same prompt twice: the second is cached
    prompt = int(str(first["prompt_tokens"]))
    assert again["prompt_tokens_details"] == {"cached_tokens": prompt - 1}  # reaches the client
    ui.router.post("/router/v1/unload", {"target": "text"})  # saves slot 0
    [saved] = (ui.router.harness.tmp / "data" / "kv-cache").glob("*/*-slot*.bin")
    saved.write_bytes(saved.read_bytes() + b"damaged")  # its checksum no longer matches
    ui.router.post("/router/v1/load", {"model": "kv-chat"})  # the restore fails

    ui.goto("/router/ui/models?model=kv-chat")
    region = ui.page.get_by_role("region", name="Configuration kv-chat")
    expect(region.get_by_role("heading", name="KV cache persistence")).to_be_visible()
    expect(region).to_contain_text("On: the probe passed.")
    history = region.get_by_label("KV cache saves and restores")
    expect(history).to_contain_text("Last save")
    expect(history).to_contain_text("1 slot")
    expect(history).to_contain_text("Last restore")
    expect(history).to_contain_text("failed its checksum")
    warning = region.get_by_role("alert")
    expect(warning).to_contain_text("The last restore failed")
    rate = region.get_by_label("Prompt cache hit rate")
    share = 100 * (prompt - 1) / (2 * prompt)
    expect(rate).to_contain_text(f"{share:.1f} %")
    expect(rate).to_contain_text(f"{prompt - 1} of {2 * prompt}, last 2 requests")
    ui.shot("model-detail-cache")


def test_the_saved_conversations_show_and_the_drop_button_erases_them(kv_ui: GuardedPage) -> None:
    ui = kv_ui
    ui.router.post("/router/v1/load", {"model": "lib-chat"})  # the probe passes
    topics = ("the river and the mill", "the lighthouse keeper's logbook")
    for topic in topics:
        body = {"model": "lib-chat", "messages": [{"role": "user", "content": topic * 8}]}
        ui.router.http.post("/v1/chat/completions", json=body).raise_for_status()
    ui.router.post("/router/v1/unload", {"target": "text"})  # the library saves both
    kv_root = ui.router.harness.tmp / "data" / "kv-cache"
    files = list(kv_root.glob("*/*-conv*.bin"))
    assert len(files) == 2, files
    size = sum(p.stat().st_size for p in files)
    ui.router.post("/router/v1/load", {"model": "lib-chat"})  # resident while its library goes

    region = _detail(ui, "lib-chat")
    saved = region.get_by_label("Saved conversations")
    expect(saved).to_contain_text("2 conversations")
    expect(saved).to_contain_text(f"{size} B" if size < 1024 else "KiB")
    expect(saved).to_contain_text("Last used")
    expect(region).not_to_contain_text(topics[0])  # counts only, never a prompt
    ui.shot("model-detail-conversations")

    region.get_by_role("button", name="Drop saved conversations").click()
    dialog = ui.page.get_by_role("dialog")
    expect(dialog).to_contain_text("Drop the saved conversations of lib-chat?")
    dialog.get_by_role("button", name="Drop").click()
    expect(region.get_by_role("heading", name="Saved conversations")).to_be_visible()
    expect(region).to_contain_text("None saved.")
    assert not any(p.exists() for p in files)
    index = json.loads((kv_root / "library.json").read_text())
    assert index["conversations"] == []
    assert ui.router.runtime_states() == {"lib-chat": "ready"}  # the drop unloads nothing
