"""Issue 26: the KV cache probe's verdict on the model's detail page (docs/swaps.md).

A router of its own whose fake llama-server answers slot save/restore/erase for `kv-chat`
(`--slot-actions`) and not for `no-slots`: loading each runs the real probe through the real
supervisor, the verdict is stored in `kv-cache/probes.json`, and the detail page shows it.
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


@pytest.fixture(scope="module")
def kv_router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiRouter]:
    _require_chromium()
    h = RouterHarness(tmp_path_factory.mktemp("ui-kv-router"))
    h.model("kv-chat")
    h.model("no-slots")
    h.model("kv-off", router_kv_persist="off")
    h.faults_for_model["kv-chat"] = "--slot-actions"
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
