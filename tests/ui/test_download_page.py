"""The Download page against a router whose downloads point at a local fake hub
(tests/fakes/fake_hub.py, run on a thread of its own): search, pick files, the plan before
anything starts, a job's live progress from its event stream, pause, resume, cancel behind a
confirm, and the library after a job completes. What the page shows is checked over HTTP."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page, expect

from tests.fakes.fake_hub import FakeHub
from tests.support.harness import RouterHarness
from tests.support.router_process import RouterProcess
from tests.ui.conftest import GuardedPage, UiRouter, _require_chromium, wait_until
from tests.ui.data_router import page_calls, run_async, serious

BASE = "/router/v1/site/download"


class HubThread:
    """The fake hub's servers on an event loop of their own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.hub: FakeHub = self.call(FakeHub().start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.call(self.hub.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def hub_router(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[UiRouter, FakeHub, Path]]:
    _require_chromium()
    hub = HubThread()
    # The 1 MiB file takes about 20 s: a loaded machine cannot finish it between the clicks
    # that pause, resume and cancel it (at 5 s, one full run saw it done before "Pause").
    hub.hub.rate = 48 * 1024
    h = RouterHarness(tmp_path_factory.mktemp("ui-download-router"))
    h.model("alpha")
    process = RouterProcess(h)
    library = h.tmp / "library"
    config = yaml.safe_load(process.config.read_text())
    config["downloads"] = {
        "endpoint": hub.hub.endpoint,
        "dir": str(library),
        "free_space_reserve_gb": 0,
    }
    process.config.write_text(yaml.safe_dump(config))
    run_async(process.start())
    router = UiRouter(process, h)
    try:
        yield router, hub.hub, library
    finally:
        router.http.close()
        process.kill()
        hub.close()


@pytest.fixture
def dl_ui(
    hub_router: tuple[UiRouter, FakeHub, Path], page: Page, tmp_path: Path
) -> Iterator[GuardedPage]:
    guarded = GuardedPage(page, hub_router[0], tmp_path)
    yield guarded
    guarded.check()


def _job(router: UiRouter, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = router.get(f"{BASE}/jobs/{job_id}")
    return job


def _pick_and_plan(ui: GuardedPage, files: list[str]) -> None:
    for path in files:
        ui.page.get_by_role("checkbox", name=f"Pick {path}").check()
    ui.page.get_by_role("button", name="Plan download").click()
    expect(ui.page.get_by_role("region", name="Plan")).to_be_visible()


def test_search_pick_plan_then_follow_pause_resume_cancel_and_complete(
    hub_router: tuple[UiRouter, FakeHub, Path], dl_ui: GuardedPage
) -> None:
    router, _hub, library = hub_router
    ui = dl_ui
    ui.goto("/router/ui/download")
    expect(ui.page.locator("main h1")).to_have_text("Download")
    expect(ui.page.get_by_role("table", name=re.compile("Downloaded files"))).to_be_visible()
    assert sorted(page_calls(ui)) == [("GET", f"{BASE}/capabilities"), ("GET", f"{BASE}/library")]

    ui.page.get_by_label("Search the hub").fill("acme")
    ui.page.get_by_role("button", name="Search", exact=True).click()
    results = ui.page.get_by_role("table", name="Repositories matching “acme”")
    expect(results.locator("tbody tr")).to_have_count(2)
    expect(results.locator("tbody tr").filter(has_text="acme/gated")).to_contain_text(
        "gated (manual)"
    )
    assert "q=acme" in ui.page.url
    ui.page.get_by_role("button", name="Choose files of acme/tiny").click()
    files = ui.page.get_by_role("table", name=re.compile(r"Files of acme\/tiny"))
    expect(files.locator("tbody tr")).to_have_count(4)
    assert "repo=acme%2Ftiny" in ui.page.url or "repo=acme/tiny" in ui.page.url

    # The plan is shown before anything starts, with the sizes against the free space.
    started_before = len(router.get(f"{BASE}/library")["jobs"])
    _pick_and_plan(ui, ["big.gguf"])
    plan = ui.page.get_by_role("region", name="Plan")
    expect(plan).to_contain_text("fits")
    expect(plan).to_contain_text("1.0 MiB to fetch")
    expect(plan).to_contain_text("free")
    assert len(router.get(f"{BASE}/library")["jobs"]) == started_before, "planning starts nothing"

    with ui.page.expect_response(
        lambda r: r.url.endswith(f"{BASE}/jobs") and r.request.method == "POST"
    ) as posted:
        plan.get_by_role("button", name="Start download").click()
    job_id = posted.value.json()["id"]
    row = ui.page.get_by_role("table", name="Download jobs, newest first").locator("tbody tr").first
    bar = row.get_by_role("progressbar", name="Download of acme/tiny")
    # Live progress from the job's event stream: bytes, a rate and an ETA while it runs.
    expect(row).to_contain_text(re.compile(r"KiB of 1\.0 MiB · [\d.]+ KiB/s · ETA \d+ s"))
    assert 0 < float(bar.get_attribute("value") or 0) < 1

    row.get_by_role("button", name="Pause").click()
    expect(row).to_contain_text("paused")
    wait_until(lambda: _job(router, job_id)["state"] == "paused", "the job paused")
    row.get_by_role("button", name="Resume").click()
    expect(row.get_by_role("button", name="Pause")).to_be_visible()
    row.get_by_role("button", name="Cancel").click()
    dialog = ui.page.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel the download of acme/tiny?")
    dialog.get_by_role("button", name="Cancel download").click()
    expect(row).to_contain_text("cancelled")
    wait_until(lambda: _job(router, job_id)["state"] == "cancelled", "the job cancelled")
    expect(row.get_by_role("button")).to_have_count(0)

    # A small job runs to its end; the library then lists its verified files.
    _pick_and_plan(ui, ["config.json", "weights/model.gguf"])
    ui.page.get_by_role("region", name="Plan").get_by_role("button", name="Start download").click()
    lib = ui.page.get_by_role("table", name=re.compile("Downloaded files"))
    expect(lib.locator("tbody tr").filter(has_text="model.gguf")).to_have_count(1)
    artifacts = router.get(f"{BASE}/library")["artifacts"]
    gguf = next(a for a in artifacts if a["path"].endswith("model.gguf"))
    expect(lib).to_contain_text(gguf["sha256"])
    assert (library / gguf["path"]).is_file()

    # With results, files, jobs and the library on screen: axe in both themes.
    _pick_and_plan(ui, ["README.md"])
    for scheme in ("light", "dark"):
        ui.page.emulate_media(color_scheme=scheme)
        problems = serious(Axe().run(ui.page))
        assert not problems, (scheme, problems)


def test_a_refused_plan_is_explained_next_to_its_button(
    hub_router: tuple[UiRouter, FakeHub, Path], dl_ui: GuardedPage
) -> None:
    ui = dl_ui
    ui.allow(rf"^{BASE}/repository$", 404)
    ui.allow(rf"^{BASE}/repository$", 502)
    ui.goto("/router/ui/download?repo=acme/nosuch")
    expect(ui.page.get_by_role("alert")).to_contain_text("acme/nosuch could not be read")
