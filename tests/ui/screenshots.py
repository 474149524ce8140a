"""`make screenshots`: every page of the nav (and the sign-in view) in both themes, written to
docs/screenshots/<page>-<theme>.png for people to look at. Not a test of pixels; it runs only
when named (`pytest tests/ui/screenshots.py`), against the same seeded router as tests/ui."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from playwright.sync_api import Page, Route, expect

from tests.ui import data_router
from tests.ui.conftest import GuardedPage, UiRouter
from tests.ui.data_router import DataRouter
from tests.ui.lending_cluster import GUARDIANS, TEXT_LINKS, LendingCluster
from tests.ui.memory_router import CHAT, EMBED, bars_router, bars_ui, tight_router, tight_ui
from tests.ui.test_lending_leases import BACKLOG, backlog
from tests.ui.test_lending_live import SETTINGS, seed_decisions
from tests.ui.test_overview import lane_row
from tests.ui.test_overview_queue import _chat_in_background

OUT = Path(os.environ.get("SCREENSHOT_DIR", Path(__file__).parents[2] / "docs" / "screenshots"))
EXTRA = {"models-detail": "models?model=beta", "config-edit": "config?id=chat-q4"}
THEMES = ("light", "dark")
data_ui_router = data_router.data_ui_router
data_ui = data_router.data_ui
__all__ = ["bars_router", "bars_ui", "tight_router", "tight_ui"]  # fixtures


def nav_pages(page: Page) -> list[str]:
    hrefs = (
        page.get_by_role("navigation")
        .get_by_role("link")
        .evaluate_all("(links) => links.map((a) => new URL(a.href).pathname)")
    )
    return [h.removeprefix("/router/ui/") for h in hrefs]


def stage(ui: GuardedPage) -> None:
    """A node with something to show: a failed load and a ready model."""
    ui.router.http.post("/router/v1/load", json={"model": "crashy"})
    ui.router.post("/router/v1/load", {"model": "alpha"})


def settle(ui: GuardedPage) -> None:
    expect(ui.page.locator("main h1")).to_have_count(1)
    expect(ui.page.locator("#connection")).to_have_text("connected")
    ui.page.wait_for_load_state("load")
    ui.page.wait_for_timeout(600)  # the snapshot render after the stream opened


def test_screenshots(ui: GuardedPage) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    stage(ui)
    ui.goto("/router/ui/overview")
    settle(ui)
    targets = {page_id: page_id for page_id in nav_pages(ui.page)} | EXTRA
    for theme in THEMES:
        ui.page.emulate_media(color_scheme=theme)
        for name, path in targets.items():
            ui.goto(f"/router/ui/{path}")
            settle(ui)
            ui.page.screenshot(path=str(OUT / f"{name}-{theme}.png"))
        shoot_login(ui, theme)


def test_overview_queue_screenshots(ui: GuardedPage) -> None:
    """The Overview while two requests wait behind a load: the lane's queue with positions and
    ETAs next to the load progress (issue 26)."""
    OUT.mkdir(parents=True, exist_ok=True)
    ui.router.post("/router/v1/load", {"model": "slowpoke"})  # a measured load: ETAs in both
    for theme in THEMES:
        ui.router.reset()
        ui.page.emulate_media(color_scheme=theme)
        ui.goto("/router/ui/overview")
        settle(ui)
        threads = [_chat_in_background(ui.router.base, "slowpoke") for _ in range(2)]  # 4 s load
        row = lane_row(ui, "text")
        queue = row.get_by_role("list", name="Waiting for the text lane")
        expect(row.get_by_role("progressbar", name="Loading slowpoke")).to_be_visible()
        expect(queue.get_by_role("listitem")).to_have_count(2)
        ui.page.screenshot(path=str(OUT / f"overview-queue-{theme}.png"))
        for thread in threads:
            thread.join(30)


def shoot_login(ui: GuardedPage, theme: str) -> None:
    """The sign-in view as a secure router shows it (the session answer says so)."""

    def secure(route: Route) -> None:
        body = {
            "authenticated": False,
            "login_required": True,
            "profile": "secure",
            "csrf_token": None,
            "expires_at": None,
            "node": {
                "node_id": "local",
                "version": "0.1.0",
                "bind": "0.0.0.0:8080",
                "profile": "secure",
            },
        }
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    ui.page.route("**/router/v1/ui/session", secure)
    ui.goto("/router/ui/login")
    expect(ui.page.locator("main h1")).to_have_text("Sign in")
    ui.page.screenshot(path=str(OUT / f"login-{theme}.png"))
    ui.page.unroute("**/router/v1/ui/session")


# The data pages again over the seeded store of tests/ui/data_router.py (the router above has
# no traffic, captures or load errors to show); these overwrite their empty shots.
DATA_PAGES = {
    "analytics": "analytics?range=24h",
    "analytics-table": "analytics?range=7d&view=table",
    "captures": "captures",
    "load-errors": "load-errors",
    "benchmarks": "benchmarks?model=alpha",
}


def test_data_page_screenshots(data_ui_router: DataRouter, data_ui: GuardedPage) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    targets = DATA_PAGES | {"capture-detail": f"captures?attempt={data_ui_router.ids['paged']}"}
    for theme in THEMES:
        data_ui.page.emulate_media(color_scheme=theme)
        for name, path in targets.items():
            data_ui.goto(f"/router/ui/{path}")
            settle(data_ui)
            data_ui.page.wait_for_load_state("networkidle")
            # The capture's console sits below the fold: that shot takes the whole page.
            full = name == "capture-detail"
            data_ui.page.screenshot(path=str(OUT / f"{name}-{theme}.png"), full_page=full)


# The Lending page on a master with a slave (tests/ui/lending_cluster.py): a link, a guardian,
# saved settings, decision rows written into the master's store, and what the summary shows;
# these overwrite the standalone router's Lending shot.
LENDING_SECTIONS = {
    "lending": "lending?section=links&lane=text&node=m&model=slow",
    "lending-guardians": "lending?section=guardians",
    "lending-leases": "lending?section=leases",
    "lending-decisions": "lending?section=decisions",
    "lending-settings": "lending?section=settings",
}


def test_lending_screenshots(lending: LendingCluster, page: Page, tmp_path: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    lending.reset()
    link = {
        "anchor": {"node_id": "m", "model_id": "slow"},
        "lends_to": [{"node_id": "s1", "model_id": "fast"}],
    }
    assert lending.http.post(TEXT_LINKS, json=link).status_code == 200
    guardian = {
        "scope": "model",
        "model_id": "slow",
        "guardian": {"node_id": "s1", "model_id": "eye2"},
    }
    assert lending.http.post(GUARDIANS, json=guardian).status_code == 200
    settings = {"settings": {"scheduling_backend_depth": 3, "offload_probe_idle": "10s"}}
    assert lending.http.post(SETTINGS, json=settings).status_code == 200
    seed_decisions(lending)
    ui = GuardedPage(page, UiRouter(lending.master, lending.master.h), tmp_path)
    for theme in THEMES:
        ui.page.emulate_media(color_scheme=theme)
        for name, path in LENDING_SECTIONS.items():
            ui.goto(f"/router/ui/{path}")
            settle(ui)
            if name == "lending-leases":
                shoot_a_lease(ui, lending, OUT / f"{name}-{theme}.png")
                continue
            ui.page.wait_for_load_state("networkidle")
            ui.page.screenshot(path=str(OUT / f"{name}-{theme}.png"), full_page=True)
    lending.reset()
    ui.check()


def shoot_a_lease(ui: GuardedPage, lending: LendingCluster, path: Path) -> None:
    """The leases section while a backlog of the slow owner is lent: shot once a lease shows."""
    with ThreadPoolExecutor(BACKLOG) as pool:
        sent = backlog(lending, pool)
        leases = ui.page.locator("main table", has_text="in force")
        expect(leases.locator("tbody tr td.num").first).to_be_visible(timeout=60_000)
        ui.page.screenshot(path=str(path), full_page=True)
        assert all(f.result() == 200 for f in sent)


# The Overview's memory bars with two runtimes of different lanes, over real demo GGUFs
# (tests/ui/memory_router.py; the seeded router above has empty model files): the chat model
# measured (solid), the embedding model still loading on its estimate (hatched).
def test_memory_screenshots(bars_ui: GuardedPage) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    bars_ui.router.post("/router/v1/load", {"model": CHAT})
    bars_ui.goto("/router/ui/overview")
    settle(bars_ui)
    expect(bars_ui.page.locator('g.mem-seg[data-source="measured"]')).to_have_count(1)
    # One 3 s load for both themes: once measured, the store's figure replaces the estimate.
    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(bars_ui.router.post, "/router/v1/load", {"model": EMBED})
        expect(bars_ui.page.locator('g.mem-seg[data-source="estimate"]')).to_have_count(1)
        for theme in THEMES:
            bars_ui.page.emulate_media(color_scheme=theme)
            bars_ui.page.screenshot(path=str(OUT / f"overview-memory-{theme}.png"), full_page=True)
        loading.result()


# The eviction confirmation: loading the embedding model would stop the chat model (48 MiB).
def test_eviction_screenshots(tight_ui: GuardedPage) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tight_ui.router.post("/router/v1/load", {"model": CHAT})
    for theme in THEMES:
        tight_ui.page.emulate_media(color_scheme=theme)
        tight_ui.goto(f"/router/ui/models?q={EMBED}")
        settle(tight_ui)
        row = tight_ui.page.locator(f'table tbody tr[data-key="{EMBED}"]')
        row.get_by_role("button", name="Load").click()
        dialog = tight_ui.page.get_by_role("dialog", name=f"Load {EMBED}?")
        expect(dialog).to_be_visible()
        tight_ui.page.screenshot(path=str(OUT / f"load-eviction-{theme}.png"))
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_have_count(0)
