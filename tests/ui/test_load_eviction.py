"""The WebUI asks before a load that evicts anything (issue 25): the Models page's Load asks
the real dry run (POST /router/v1/load {"dry_run": true}) first; a load that stops runtimes
is confirmed in a dialog naming them (model, lane, reason); a load that cannot fit says why
and loads nothing. A real router (fake backends, real demo GGUFs) with a 48 MiB host budget."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Locator, Request, expect

from tests.ui.conftest import GuardedPage, wait_until
from tests.ui.memory_router import CHAT, EMBED, PINNED, tight_router, tight_ui

__all__ = ["tight_router", "tight_ui"]  # fixtures


def model_row(ui: GuardedPage, model: str) -> Locator:
    return ui.page.locator(f'table tbody tr[data-key="{model}"]')


def measured(ui: GuardedPage, model: str) -> bool:
    runtimes = ui.router.get("/router/v1/status")["runtimes"]
    return any(rt["model"] == model and rt["memory"]["source"] == "measured" for rt in runtimes)


def load_bodies(ui: GuardedPage) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []

    def seen(request: Request) -> None:
        if request.method == "POST" and request.url.endswith("/router/v1/load"):
            bodies.append(json.loads(request.post_data or "{}"))

    ui.page.on("request", seen)
    return bodies


def test_a_load_that_evicts_asks_first_naming_the_victims(tight_ui: GuardedPage) -> None:
    ui = tight_ui
    ui.router.post("/router/v1/load", {"model": CHAT})
    # Measured just after its load (its reason then names the measured load time): wait, so
    # the page's dry run and this one see the same ledger.
    wait_until(lambda: measured(ui, CHAT), f"{CHAT} measured")
    plan = ui.router.post("/router/v1/load", {"model": EMBED, "dry_run": True})
    assert plan["fits"] and [v["model"] for v in plan["evict"]] == [CHAT], plan
    bodies = load_bodies(ui)
    ui.goto(f"/router/ui/models?q={EMBED}")
    row = model_row(ui, EMBED)
    row.get_by_role("button", name="Load").click()
    dialog = ui.page.get_by_role("dialog", name=f"Load {EMBED}?")
    expect(dialog).to_be_visible()
    victims = dialog.get_by_role("list", name="Runtimes the load stops")
    expect(victims.locator("li")).to_have_count(1)
    (victim,) = plan["evict"]
    assert victim["lane"] == "text" and victim["reason"].startswith("idle"), victim  # memory
    expect(victims.locator("li")).to_have_text(f"{CHAT} (text): {victim['reason']}")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert bodies == [{"model": EMBED, "dry_run": True}]
    assert ui.router.runtime_states() == {CHAT: "ready"}  # nothing stopped, nothing loaded

    row.get_by_role("button", name="Load").click()
    dialog.get_by_role("button", name="Stop it and load").click()
    expect(row.locator("td").nth(2)).to_have_text("ready")
    wait_until(lambda: ui.router.runtime_states() == {EMBED: "ready"}, f"{CHAT} evicted")
    assert bodies[1:] == [{"model": EMBED, "dry_run": True}, {"model": EMBED}]
    ui.shot("load-eviction")


def test_a_load_that_fits_goes_ahead_without_asking(tight_ui: GuardedPage) -> None:
    ui = tight_ui
    bodies = load_bodies(ui)
    ui.goto(f"/router/ui/models?q={CHAT}")
    row = model_row(ui, CHAT)
    row.get_by_role("button", name="Load").click()
    expect(row.locator("td").nth(2)).to_have_text("ready")
    expect(ui.page.get_by_role("dialog")).to_have_count(0)
    assert bodies == [{"model": CHAT, "dry_run": True}, {"model": CHAT}]


def test_a_load_that_cannot_fit_says_why_and_loads_nothing(tight_ui: GuardedPage) -> None:
    ui = tight_ui
    ui.router.post("/router/v1/load", {"model": PINNED})  # router_pin: never evicted
    wait_until(lambda: measured(ui, PINNED), f"{PINNED} measured")
    plan = ui.router.post("/router/v1/load", {"model": CHAT, "dry_run": True})
    assert plan["fits"] is False, plan
    bodies = load_bodies(ui)
    ui.goto(f"/router/ui/models?q={CHAT}")
    row = model_row(ui, CHAT)
    row.get_by_role("button", name="Load").click()
    alert = row.get_by_role("alert")
    expect(alert).to_contain_text(f"{CHAT} does not fit now: host needs about")
    expect(alert).to_contain_text("of a 48.0 MiB budget")
    expect(ui.page.get_by_role("dialog")).to_have_count(0)
    assert bodies == [{"model": CHAT, "dry_run": True}]
    assert ui.router.runtime_states() == {PINNED: "ready"}
