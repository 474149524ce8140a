"""The Lending page's live leases against the real summary route on a master with a slave:
a lease of the fast helper while a backlog of the slow owner is lent to the fast helper,
the summary read every few seconds and never while the tab is hidden, and the decision rows
the backlog left."""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
from playwright.sync_api import expect

from tests.support.harness import chat
from tests.ui.conftest import GuardedPage, wait_until
from tests.ui.lending_cluster import TEXT_LINKS, TOKENS, LendingCluster
from tests.ui.test_lending_live import DECISIONS, LINK, decisions_read, folded_count

BACKLOG = 24


def backlog(lending: LendingCluster, pool: ThreadPoolExecutor) -> list[Future[int]]:
    """BACKLOG concurrent chats for the slow owner, from threads (the browser holds this one)."""

    def one() -> int:
        return httpx.post(
            lending.master.base + "/v1/chat/completions",
            json=chat("slow", max_tokens=TOKENS),
            timeout=120,
        ).status_code

    return [pool.submit(one) for _ in range(BACKLOG)]


def test_a_lease_shows_while_a_backlog_is_lent(
    lending_ui: GuardedPage, lending: LendingCluster
) -> None:
    assert lending.http.post(TEXT_LINKS, json=LINK).status_code == 200
    lending_ui.goto("/router/ui/lending?section=leases")
    expect(lending_ui.page.locator("main table", has_text="Requests per node")).to_be_visible()
    with ThreadPoolExecutor(BACKLOG) as pool:
        sent = backlog(lending, pool)
        # While it drains, a refresh shows the master's lease of the fast helper.
        lease = lending_ui.page.locator('main table tbody tr[data-key="text/m/slow>s1/fast"]')
        expect(lease).to_be_visible(timeout=60_000)
        expect(lease.locator("th")).to_have_text("m/slow")
        expect(lease).to_contain_text("s1/fast")
        expect(lease.locator("td").nth(2)).to_have_text(re.compile(r"^\d+ of \d+$"))
        expect(lease.locator("td").last).to_have_text(re.compile(r"^(\d+ s|expiring)$"))
        assert all(f.result() == 200 for f in sent)
    # Once drained, the per-node counts are back to zero on a later refresh.
    lending_ui.page.wait_for_function(
        """() => [...[...document.querySelectorAll('main table')][0].querySelectorAll('td.num')]
                 .every(td => td.textContent === '0' || td.textContent === '—')""",
        timeout=30_000,
    )


def lent_backlog(lending: LendingCluster, rows: int) -> None:
    assert lending.http.post(TEXT_LINKS, json=LINK).status_code == 200
    with ThreadPoolExecutor(BACKLOG) as pool:
        assert all(f.result() == 200 for f in backlog(lending, pool))
    wait_until(
        lambda: len(lending.get(DECISIONS)["decisions"]) >= rows, f"{rows} decision rows", 45.0
    )


def test_the_decision_log_shows_the_rows_of_a_lent_backlog(
    lending_ui: GuardedPage, lending: LendingCluster
) -> None:
    lent_backlog(lending, 1)
    _, answer = decisions_read(
        lending_ui, lambda: lending_ui.goto("/router/ui/lending?section=decisions")
    )
    rows = answer["decisions"]
    table = lending_ui.page.locator("main table", has_text="decision(s) read")
    expect(table.locator("caption")).to_contain_text(f"{len(rows)} decision(s) read")
    expect(table.locator("tbody tr")).to_have_count(folded_count(rows))
    assert [r["at"] for r in rows] == sorted((r["at"] for r in rows), reverse=True)
    newest = rows[0]
    first = table.locator("tbody tr").first
    expect(first).to_contain_text(newest["kind"])
    expect(first).to_contain_text(newest["outcome"])
    first.get_by_role("button", name=f"Open decision {newest['id']}").click()
    detail = lending_ui.page.locator("#decision-detail")
    expect(detail).to_be_focused()
    expect(detail).to_contain_text(f"Decision {newest['id']}")
    # A filter reads the route with it, and the URL keeps it.
    url, answer = decisions_read(
        lending_ui, lambda: lending_ui.page.get_by_label("Kind").select_option("dispatch")
    )
    assert "kind=dispatch" in url and "kind=dispatch" in lending_ui.page.url
    expect(table.locator("caption")).to_contain_text(f"{len(answer['decisions'])} decision(s) read")
    for cell in table.locator("tbody tr td:nth-of-type(1)").all_text_contents():
        assert cell in ("dispatch", "No decision matches")


HIDE = (
    "(state) => { Object.defineProperty(document, 'visibilityState', "
    "{value: state, configurable: true}); document.dispatchEvent(new Event('visibilitychange')); }"
)


def wait_calls(lending_ui: GuardedPage, path: str, count: int, what: str, seconds: float) -> None:
    """Playwright records requests only while it runs: wait in the page, not in time.sleep."""
    for _ in range(int(seconds * 10)):
        if len(lending_ui.calls(path)) >= count:
            return
        lending_ui.page.wait_for_timeout(100)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_summary_is_read_every_few_seconds_and_not_while_hidden(
    lending_ui: GuardedPage,
) -> None:
    summary = "/router/v1/site/offload/summary"
    lending_ui.goto("/router/ui/lending?section=leases")
    expect(lending_ui.page.locator("main table", has_text="Requests per node")).to_be_visible()
    wait_calls(lending_ui, summary, 2, "a second read of the summary", 15)
    lending_ui.page.evaluate(HIDE, "hidden")
    lending_ui.page.wait_for_timeout(500)  # a read already on its way may still land
    before = len(lending_ui.calls(summary))
    lending_ui.page.wait_for_timeout(3000 + 2500)  # longer than the 3 s refresh
    assert len(lending_ui.calls(summary)) == before
    lending_ui.page.evaluate(HIDE, "visible")
    wait_calls(lending_ui, summary, before + 1, "a read when the tab is shown again", 5)
    # Leaving the section stops the reads.
    lending_ui.page.get_by_role("button", name="Settings").click()
    lending_ui.page.wait_for_timeout(500)
    left = len(lending_ui.calls(summary))
    lending_ui.page.wait_for_timeout(3000 + 1500)
    assert len(lending_ui.calls(summary)) == left
