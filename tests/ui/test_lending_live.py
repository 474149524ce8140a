"""The Lending page's scheduler sections against the real routes on a master with a slave:
the settings form (a saved value in force, a refused batch naming its key and changing
nothing, Default per key and for all), the decision log after a backlog was lent (rows, folding
as the route's rows fold, filters, detail), and the live leases and per-node counts while the
backlog drains."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.ui.conftest import GuardedPage, UiRouter
from tests.ui.lending_cluster import TEXT_LINKS, TOKENS, LendingCluster, lending, wait_for

__all__ = ["lending"]
SETTINGS = "/router/v1/site/offload/settings"
DECISIONS = "/router/v1/site/offload/decisions"
BACKLOG = 24
LINK = {"anchor": {"node_id": "m", "model_id": "slow"},
        "lends_to": [{"node_id": "s1", "model_id": "fast"}]}  # fmt: skip


@pytest.fixture
def ui(lending: LendingCluster, page: Page, tmp_path: Path) -> Iterator[GuardedPage]:
    lending.reset()
    guarded = GuardedPage(page, UiRouter(lending.master, lending.master.h), tmp_path)
    yield guarded
    guarded.check()
    lending.reset()


def by_key(lending: LendingCluster) -> dict[str, dict[str, Any]]:
    return {s["key"]: s for s in lending.get(SETTINGS)["settings"]}


def test_settings_save_refuse_and_default(ui: GuardedPage, lending: LendingCluster) -> None:
    ui.allow(r"/router/v1/site/offload/settings$", 400)
    ui.goto("/router/ui/lending?section=settings")
    form = ui.page.get_by_role("form", name="Lending settings")
    expect(form.locator("tbody tr")).to_have_count(13)
    depth = form.get_by_label("scheduling_backend_depth", exact=True)
    ttl = form.get_by_label("scheduling_grant_ttl", exact=True)
    expect(depth).to_have_value(str(by_key(lending)["scheduling_backend_depth"]["effective"]))
    depth.fill("4")
    form.get_by_role("button", name="Save settings").click()
    expect(ui.page.locator("main [role=status]").first).to_have_text(
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
    error = ui.page.locator("#setting-scheduling_backend_depth-error [role=alert]")
    expect(error).to_be_visible()
    expect(depth).to_have_attribute("aria-invalid", "true")
    expect(ui.page.locator("#settings-error")).to_contain_text("scheduling_backend_depth")
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
    expect(ui.page.locator("main [role=status]").first).to_have_text("Saved scheduling_grant_ttl.")
    assert by_key(lending)["scheduling_grant_ttl"]["effective"] == 45
    # A boolean, then Default for all.
    form.get_by_label("offload_hold_for_faster_helper", exact=True).click()
    form.get_by_role("button", name="Save settings").click()
    expect(ui.page.locator("main [role=status]").first).to_contain_text(
        "offload_hold_for_faster_helper"
    )
    hold = by_key(lending)["offload_hold_for_faster_helper"]
    assert hold["saved"] is (not hold["config"])
    form.get_by_role("button", name="Default for all").click()
    ui.page.get_by_role("dialog").get_by_role("button", name="Default for all").click()
    expect(ui.page.locator("main [role=status]").first).to_contain_text("back to the config file")
    assert all(s["saved"] is None for s in by_key(lending).values())
    expect(form.get_by_label("scheduling_grant_ttl", exact=True)).to_have_value("30s")


def chat() -> dict[str, Any]:
    return {"model": "slow", "max_tokens": TOKENS,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip


def backlog(lending: LendingCluster, pool: ThreadPoolExecutor) -> list[Future[int]]:
    """BACKLOG concurrent chats for the slow owner, from threads (the browser holds this one)."""

    def one() -> int:
        return httpx.post(
            lending.master.base + "/v1/chat/completions", json=chat(), timeout=120
        ).status_code

    return [pool.submit(one) for _ in range(BACKLOG)]


def test_leases_and_counts_show_while_a_backlog_is_lent(
    ui: GuardedPage, lending: LendingCluster
) -> None:
    assert lending.http.post(TEXT_LINKS, json=LINK).status_code == 200
    ui.goto("/router/ui/lending?section=leases")
    expect(ui.page.locator("main table", has_text="Requests per node")).to_be_visible()
    with ThreadPoolExecutor(BACKLOG) as pool:
        sent = backlog(lending, pool)
        # While it drains, a refresh shows work held or lent for the owner, or a lease.
        ui.page.wait_for_function(
            """() => {
                const lease = [...document.querySelectorAll('main table')]
                  .find(t => t.caption && t.caption.textContent.includes('in force'));
                const leased = lease && lease.querySelector('tbody tr:not(:has(td.empty))');
                const counts = [...document.querySelectorAll('main table')][0];
                const busy = [...counts.querySelectorAll('tbody tr')].some(tr =>
                  [...tr.querySelectorAll('td.num')].some(td => Number(td.textContent) > 0));
                return Boolean(leased) || busy;
            }""",
            timeout=60_000,
        )
        assert all(f.result() == 200 for f in sent)
    # Once drained, the counts come back to zero on a later refresh.
    ui.page.wait_for_function(
        """() => [...[...document.querySelectorAll('main table')][0].querySelectorAll('td.num')]
                 .every(td => td.textContent === '0')""",
        timeout=30_000,
    )


def folded_count(rows: list[dict[str, Any]]) -> int:
    keys = ("kind", "trigger", "outcome", "lane", "owner_node_id", "owner_model_id",
            "helper_node_id", "helper_model_id")  # fmt: skip
    count, last = 0, None
    for row in rows:
        sig = json.dumps([[row.get(k) or "" for k in keys], row.get("reasons") or []])
        count += sig != last
        last = sig
    return count


def decisions_read(ui: GuardedPage, action: Any) -> tuple[str, dict[str, Any]]:
    """What the page asked the decisions route and what it answered, around `action()` (the
    log can grow meanwhile: the check compares with what the page itself was given)."""
    with ui.page.expect_response(lambda r: "/site/offload/decisions" in r.url) as seen:
        action()
    return seen.value.url, seen.value.json()


def lent_backlog(lending: LendingCluster, rows: int) -> None:
    assert lending.http.post(TEXT_LINKS, json=LINK).status_code == 200
    with ThreadPoolExecutor(BACKLOG) as pool:
        assert all(f.result() == 200 for f in backlog(lending, pool))
    wait_for(lambda: len(lending.get(DECISIONS)["decisions"]) >= rows, f"{rows} decision rows")


def test_the_decision_log_shows_the_rows_of_a_lent_backlog(
    ui: GuardedPage, lending: LendingCluster
) -> None:
    lent_backlog(lending, 1)
    _, answer = decisions_read(ui, lambda: ui.goto("/router/ui/lending?section=decisions"))
    rows = answer["decisions"]
    table = ui.page.locator("main table", has_text="decision(s) read")
    expect(table.locator("caption")).to_contain_text(f"{len(rows)} decision(s) read")
    expect(table.locator("tbody tr")).to_have_count(folded_count(rows))
    assert [r["at"] for r in rows] == sorted((r["at"] for r in rows), reverse=True)
    newest = rows[0]
    first = table.locator("tbody tr").first
    expect(first).to_contain_text(newest["kind"])
    expect(first).to_contain_text(newest["outcome"])
    first.get_by_role("button", name=f"Open decision {newest['id']}").click()
    detail = ui.page.locator("#decision-detail")
    expect(detail).to_be_focused()
    expect(detail).to_contain_text(f"Decision {newest['id']}")
    # A filter reads the route with it, and the URL keeps it.
    url, answer = decisions_read(ui, lambda: ui.page.get_by_label("Kind").select_option("dispatch"))
    assert "kind=dispatch" in url and "kind=dispatch" in ui.page.url
    expect(table.locator("caption")).to_contain_text(f"{len(answer['decisions'])} decision(s) read")
    for cell in table.locator("tbody tr td:nth-of-type(1)").all_text_contents():
        assert cell in ("dispatch", "No decision matches")


def test_older_decisions_page_by_next_before(ui: GuardedPage, lending: LendingCluster) -> None:
    lent_backlog(lending, 5)
    # The real route with a small page (the page asks for 100): the cursor is the router's.
    ui.page.route(
        "**/router/v1/site/offload/decisions?*",
        lambda route: route.continue_(url=route.request.url.replace("limit=100", "limit=4")),
    )
    _, first = decisions_read(ui, lambda: ui.goto("/router/ui/lending?section=decisions"))
    table = ui.page.locator("main table", has_text="decision(s) read")
    expect(table.locator("caption")).to_contain_text("4 decision(s) read")
    assert first["next_before"] is not None
    url, second = decisions_read(
        ui, lambda: ui.page.get_by_role("button", name="Older decisions").click()
    )
    assert f"before={first['next_before']}" in url
    rows = first["decisions"] + second["decisions"]
    expect(table.locator("caption")).to_contain_text(f"{len(rows)} decision(s) read")
    expect(table.locator("tbody tr")).to_have_count(folded_count(rows))
    assert max(r["id"] for r in second["decisions"]) < min(r["id"] for r in first["decisions"])


HIDE = (
    "(state) => { Object.defineProperty(document, 'visibilityState', "
    "{value: state, configurable: true}); document.dispatchEvent(new Event('visibilitychange')); }"
)


def wait_calls(ui: GuardedPage, path: str, count: int, what: str, seconds: float) -> None:
    """Playwright records requests only while it runs: wait in the page, not in time.sleep."""
    for _ in range(int(seconds * 10)):
        if len(ui.calls(path)) >= count:
            return
        ui.page.wait_for_timeout(100)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_summary_is_read_every_few_seconds_and_not_while_hidden(ui: GuardedPage) -> None:
    summary = "/router/v1/site/offload/summary"
    ui.goto("/router/ui/lending?section=leases")
    expect(ui.page.locator("main table", has_text="Requests per node")).to_be_visible()
    wait_calls(ui, summary, 2, "a second read of the summary", 15)
    ui.page.evaluate(HIDE, "hidden")
    ui.page.wait_for_timeout(500)  # a read already on its way may still land
    before = len(ui.calls(summary))
    ui.page.wait_for_timeout(3000 + 2500)  # longer than the 3 s refresh
    assert len(ui.calls(summary)) == before
    ui.page.evaluate(HIDE, "visible")
    wait_calls(ui, summary, before + 1, "a read when the tab is shown again", 5)
    # Leaving the section stops the reads.
    ui.page.get_by_role("button", name="Settings").click()
    ui.page.wait_for_timeout(500)
    left = len(ui.calls(summary))
    ui.page.wait_for_timeout(3000 + 1500)
    assert len(ui.calls(summary)) == left


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
        rows.append((now - SEEDED + i, kind, trigger, outcome, json.dumps(reasons), lane,
                     "m", owner, "s1", helper, "0.1.0", detail))  # fmt: skip
    with sqlite3.connect(lending.master_db) as db:
        db.execute("DELETE FROM offload_decisions")
        db.executemany(
            'INSERT INTO offload_decisions (at, kind, "trigger", outcome, reasons, lane, '
            "owner_node_id, owner_model_id, helper_node_id, helper_model_id, router_version, "
            "detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def test_the_decision_log_folds_filters_pages_and_opens(
    ui: GuardedPage, lending: LendingCluster
) -> None:
    seed_decisions(lending)
    _, first = decisions_read(ui, lambda: ui.goto("/router/ui/lending?section=decisions"))
    assert len(first["decisions"]) == 100 and first["next_before"] is not None
    table = ui.page.locator("main table", has_text="decision(s) read")
    expect(table.locator("caption")).to_contain_text("100 decision(s) read")
    expect(table.locator("tbody tr")).to_have_count(folded_count(first["decisions"]))
    # A folded run shows its count; the newest row is first.
    newest = first["decisions"][0]
    assert newest["detail"] == {"seeded": SEEDED - 1}
    expect(table.locator("tbody tr").first).to_contain_text(newest["outcome"])
    expect(table.locator(".fold").first).to_have_text(re.compile(r"^×[2-9]\d*$"))
    # Older: the router's cursor, appended below.
    url, second = decisions_read(
        ui, lambda: ui.page.get_by_role("button", name="Older decisions").click()
    )
    assert f"before={first['next_before']}" in url and second["next_before"] is None
    rows = first["decisions"] + second["decisions"]
    assert len(rows) == SEEDED
    expect(table.locator("caption")).to_contain_text(f"{SEEDED} decision(s) read")
    expect(table.locator("tbody tr")).to_have_count(folded_count(rows))
    expect(ui.page.get_by_role("button", name="Older decisions")).to_have_count(0)
    # A row's detail: its fields, the ids folded into it, its detail object.
    folded = table.locator("tbody tr", has=ui.page.locator(".fold")).first
    folded.get_by_role("button", name=re.compile(r"^Open decision ")).click()
    detail = ui.page.locator("#decision-detail")
    expect(detail).to_be_focused()
    expect(detail).to_contain_text("identical older")
    expect(detail).to_contain_text('"seeded"')
    # Filters: each read from the route with the filter, kept in the URL.
    url, answer = decisions_read(ui, lambda: ui.page.get_by_label("Kind").select_option("dispatch"))
    assert "kind=dispatch" in url and "kind=dispatch" in ui.page.url
    assert {r["kind"] for r in answer["decisions"]} == {"dispatch"}
    expect(table.locator("caption")).to_contain_text(f"{len(answer['decisions'])} decision(s) read")
    assert set(table.locator("tbody tr td:nth-of-type(1)").all_text_contents()) == {"dispatch"}
    url, answer = decisions_read(ui, lambda: ui.page.get_by_label("Lane").select_option("image"))
    assert "lane=image" in url and {r["lane"] for r in answer["decisions"]} == {"image"}
    expect(table.locator("tbody tr").first).to_contain_text("m/pic")
    decisions_read(ui, lambda: ui.page.get_by_label("Kind").select_option(""))
    decisions_read(ui, lambda: ui.page.get_by_label("Lane").select_option(""))

    def by_model() -> None:
        ui.page.get_by_label("Model").fill("pic2")
        ui.page.get_by_label("Model").press("Enter")

    url, answer = decisions_read(ui, by_model)
    assert "model_id=pic2" in url and "model=pic2" in ui.page.url
    assert answer["decisions"] and all(
        "pic2" in (r["owner_model_id"], r["helper_model_id"]) for r in answer["decisions"]
    )
    # Back in a new visit, the URL restores the filter.
    ui.page.reload()
    expect(ui.page.get_by_label("Model")).to_have_value("pic2")
    expect(table.locator("tbody tr").first).to_contain_text("s1/pic2")


def test_the_decision_log_of_another_node(ui: GuardedPage, lending: LendingCluster) -> None:
    seed_decisions(lending)
    ui.goto("/router/ui/lending?section=decisions")
    table = ui.page.locator("main table", has_text="decision(s) read")
    expect(table.locator("caption")).to_contain_text("100 decision(s) read")
    # The slave's own log (its helper side), relayed by the master: nothing seeded there.
    url, answer = decisions_read(ui, lambda: ui.page.get_by_label("Log of").select_option("s1"))
    assert "node_id=s1" in url and "node=s1" in ui.page.url
    expect(table.locator("caption")).to_contain_text(f"{len(answer['decisions'])} decision(s) read")
    if not answer["decisions"]:
        expect(table).to_contain_text("No decision matches")
