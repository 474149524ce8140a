"""The Lending page's settings and decision log against the real routes on a master with a
slave: the settings form (a saved value in force, a refused batch naming its key and changing
nothing, Default per key and for all), and the decision log over rows in the master's store
(two pages, folding as the route's rows fold, filters in the URL, a row's detail, another
node's log)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.ui.conftest import GuardedPage
from tests.ui.lending_cluster import LendingCluster
from tests.ui.test_lending_page import check_sections

SETTINGS = "/router/v1/site/offload/settings"
DECISIONS = "/router/v1/site/offload/decisions"
LINK = {
    "anchor": {"node_id": "m", "model_id": "slow"},
    "lends_to": [{"node_id": "s1", "model_id": "fast"}],
}


def by_key(lending: LendingCluster) -> dict[str, dict[str, Any]]:
    return {s["key"]: s for s in lending.get(SETTINGS)["settings"]}


def test_settings_save_refuse_and_default(lending_ui: GuardedPage, lending: LendingCluster) -> None:
    lending_ui.allow(r"/router/v1/site/offload/settings$", 400)
    lending_ui.goto("/router/ui/lending?section=settings")
    form = lending_ui.page.get_by_role("form", name="Lending settings")
    expect(form.locator("tbody tr")).to_have_count(13)
    depth = form.get_by_label("scheduling_backend_depth", exact=True)
    ttl = form.get_by_label("scheduling_grant_ttl", exact=True)
    expect(depth).to_have_value(str(by_key(lending)["scheduling_backend_depth"]["effective"]))
    depth.fill("4")
    form.get_by_role("button", name="Save settings").click()
    expect(lending_ui.page.locator("main [role=status]").first).to_have_text(
        "Saved scheduling_backend_depth."
    )
    saved = by_key(lending)["scheduling_backend_depth"]
    assert (saved["saved"], saved["effective"]) == (4, 4)
    row = form.locator('tbody tr[data-key="scheduling_backend_depth"]')
    expect(row.locator("td").nth(2)).to_have_text("4")  # "Saved here"
    # One bad value in the batch: the router names it, nothing changes, the typing stays.
    depth.fill("0")
    ttl.fill("45s")
    form.get_by_role("button", name="Save settings").click()
    error = lending_ui.page.locator("#setting-scheduling_backend_depth-error [role=alert]")
    expect(error).to_be_visible()
    expect(depth).to_have_attribute("aria-invalid", "true")
    expect(lending_ui.page.locator("#settings-error")).to_contain_text("scheduling_backend_depth")
    expect(depth).to_have_value("0")
    expect(ttl).to_have_value("45s")
    now = by_key(lending)
    assert now["scheduling_backend_depth"]["effective"] == 4
    assert now["scheduling_grant_ttl"]["saved"] is None
    # Default on the row: back to the config file's value; the typed ttl is kept.
    row.get_by_role("button", name="Default for scheduling_backend_depth").click()
    expect(row.locator("td").nth(2)).to_have_text("—")
    now = by_key(lending)["scheduling_backend_depth"]
    assert now["saved"] is None and now["effective"] == now["config"]
    expect(ttl).to_have_value("45s")
    form.get_by_role("button", name="Save settings").click()
    expect(lending_ui.page.locator("main [role=status]").first).to_have_text(
        "Saved scheduling_grant_ttl."
    )
    assert by_key(lending)["scheduling_grant_ttl"]["effective"] == 45
    # A boolean, then Default for all.
    form.get_by_label("offload_hold_for_faster_helper", exact=True).click()
    form.get_by_role("button", name="Save settings").click()
    expect(lending_ui.page.locator("main [role=status]").first).to_contain_text(
        "offload_hold_for_faster_helper"
    )
    hold = by_key(lending)["offload_hold_for_faster_helper"]
    assert hold["saved"] is (not hold["config"])
    form.get_by_role("button", name="Default for all").click()
    lending_ui.page.get_by_role("dialog").get_by_role("button", name="Default for all").click()
    expect(lending_ui.page.locator("main [role=status]").first).to_contain_text(
        "back to the config file"
    )
    assert all(s["saved"] is None for s in by_key(lending).values())
    expect(form.get_by_label("scheduling_grant_ttl", exact=True)).to_have_value("30s")


def folded_count(rows: list[dict[str, Any]]) -> int:
    keys = (
        "kind",
        "trigger",
        "outcome",
        "lane",
        "owner_node_id",
        "owner_model_id",
        "helper_node_id",
        "helper_model_id",
    )
    count, last = 0, None
    for row in rows:
        sig = json.dumps([[row.get(k) or "" for k in keys], row.get("reasons") or []])
        count += sig != last
        last = sig
    return count


def decisions_read(lending_ui: GuardedPage, action: Any) -> tuple[str, dict[str, Any]]:
    """What the page asked the decisions route and what it answered, around `action()` (the
    log can grow meanwhile: the check compares with what the page itself was given)."""
    with lending_ui.page.expect_response(lambda r: "/site/offload/decisions" in r.url) as seen:
        action()
    return seen.value.url, seen.value.json()


SEEDED = 130  # more than one page of 100


def seed_decisions(lending: LendingCluster) -> None:
    """Rows written into the master's store file, as its log's sink writes them (WAL: the
    route's reader sees them): runs of identical plan rows, dispatch rows, an image lane."""
    now = time.time()
    rows = []
    for i in range(SEEDED):
        kind, outcome, trigger, lane = "plan", "skipped", "tick", "text"
        reasons = ["owner_unpriced"] if (i // 5) % 2 == 0 else ["cost_rejected"]
        if i % 7 == 0:
            kind, outcome, trigger, reasons = "dispatch", "lent", "", []
        if i % 11 == 0:
            lane = "image"
        owner, helper = ("pic", "pic2") if lane == "image" else ("slow", "fast")
        detail = json.dumps({"seeded": i})
        rows.append(
            (
                now - SEEDED + i,
                kind,
                trigger,
                outcome,
                json.dumps(reasons),
                lane,
                "m",
                owner,
                "s1",
                helper,
                "0.1.0",
                detail,
            )
        )
    with sqlite3.connect(lending.master_db) as db:
        db.execute("DELETE FROM offload_decisions")
        db.executemany(
            'INSERT INTO offload_decisions (at, kind, "trigger", outcome, reasons, lane, '
            "owner_node_id, owner_model_id, helper_node_id, helper_model_id, router_version, "
            "detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def test_the_decision_log_folds_filters_pages_and_opens(
    lending_ui: GuardedPage, lending: LendingCluster
) -> None:
    seed_decisions(lending)
    _, first = decisions_read(
        lending_ui, lambda: lending_ui.goto("/router/ui/lending?section=decisions")
    )
    assert len(first["decisions"]) == 100 and first["next_before"] is not None
    table = lending_ui.page.locator("main table", has_text="decision(s) read")
    expect(table.locator("caption")).to_contain_text("100 decision(s) read")
    expect(table.locator("tbody tr")).to_have_count(folded_count(first["decisions"]))
    # A folded run shows its count; the newest row is first.
    newest = first["decisions"][0]
    assert newest["detail"] == {"seeded": SEEDED - 1}
    expect(table.locator("tbody tr").first).to_contain_text(newest["outcome"])
    expect(table.locator(".fold").first).to_have_text(re.compile(r"^×[2-9]\d*$"))
    # Older: the router's cursor, appended below.
    url, second = decisions_read(
        lending_ui, lambda: lending_ui.page.get_by_role("button", name="Older decisions").click()
    )
    assert f"before={first['next_before']}" in url and second["next_before"] is None
    rows = first["decisions"] + second["decisions"]
    assert len(rows) == SEEDED
    expect(table.locator("caption")).to_contain_text(f"{SEEDED} decision(s) read")
    expect(table.locator("tbody tr")).to_have_count(folded_count(rows))
    expect(lending_ui.page.get_by_role("button", name="Older decisions")).to_have_count(0)
    # A row's detail: its fields, the ids folded into it, its detail object.
    folded = table.locator("tbody tr", has=lending_ui.page.locator(".fold")).first
    folded.get_by_role("button", name=re.compile(r"^Open decision ")).click()
    detail = lending_ui.page.locator("#decision-detail")
    expect(detail).to_be_focused()
    expect(detail).to_contain_text("identical older")
    expect(detail).to_contain_text('"seeded"')
    # Filters: each read from the route with the filter, kept in the URL.
    url, answer = decisions_read(
        lending_ui, lambda: lending_ui.page.get_by_label("Kind").select_option("dispatch")
    )
    assert "kind=dispatch" in url and "kind=dispatch" in lending_ui.page.url
    assert {r["kind"] for r in answer["decisions"]} == {"dispatch"}
    expect(table.locator("caption")).to_contain_text(f"{len(answer['decisions'])} decision(s) read")
    assert set(table.locator("tbody tr td:nth-of-type(1)").all_text_contents()) == {"dispatch"}
    url, answer = decisions_read(
        lending_ui, lambda: lending_ui.page.get_by_label("Lane").select_option("image")
    )
    assert "lane=image" in url and {r["lane"] for r in answer["decisions"]} == {"image"}
    expect(table.locator("tbody tr").first).to_contain_text("m/pic")
    decisions_read(lending_ui, lambda: lending_ui.page.get_by_label("Kind").select_option(""))
    decisions_read(lending_ui, lambda: lending_ui.page.get_by_label("Lane").select_option(""))

    def by_model() -> None:
        lending_ui.page.get_by_label("Model").fill("pic2")
        lending_ui.page.get_by_label("Model").press("Enter")

    url, answer = decisions_read(lending_ui, by_model)
    assert "model_id=pic2" in url and "model=pic2" in lending_ui.page.url
    assert answer["decisions"] and all(
        "pic2" in (r["owner_model_id"], r["helper_model_id"]) for r in answer["decisions"]
    )
    # Back in a new visit, the URL restores the filter.
    lending_ui.page.reload()
    expect(lending_ui.page.get_by_label("Model")).to_have_value("pic2")
    expect(table.locator("tbody tr").first).to_contain_text("s1/pic2")


def test_the_decision_log_of_another_node(lending_ui: GuardedPage, lending: LendingCluster) -> None:
    seed_decisions(lending)
    lending_ui.goto("/router/ui/lending?section=decisions")
    table = lending_ui.page.locator("main table", has_text="decision(s) read")
    expect(table.locator("caption")).to_contain_text("100 decision(s) read")
    # The slave's own log (its helper side), relayed by the master: nothing seeded there.
    url, answer = decisions_read(
        lending_ui, lambda: lending_ui.page.get_by_label("Log of").select_option("s1")
    )
    assert "node_id=s1" in url and "node=s1" in lending_ui.page.url
    expect(table.locator("caption")).to_contain_text(f"{len(answer['decisions'])} decision(s) read")
    if not answer["decisions"]:
        expect(table).to_contain_text("No decision matches")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_scheduler_sections_pass_axe_and_fit_a_phone(
    lending_ui: GuardedPage, lending: LendingCluster, theme: str
) -> None:
    seed_decisions(lending)
    check_sections(lending_ui, theme, ("section=settings", "section=decisions", "section=leases"))
