"""The Overview lists remote devices (issue 34, docs/cluster.md "Pooled memory"): one row per
lending node and runtime with its budget, use and the runtime holding it, read from the
status's `remote_devices`. The status a pooled master answers is given to the page at the
HTTP seam (a real two-router RPC set-up is tests/real/test_pooled_real.py's)."""

from __future__ import annotations

import json

from playwright.sync_api import Route, expect

from tests.ui.conftest import GuardedPage

MiB = 1024 * 1024
REMOTE = {
    "runtime": "text:spread",
    "node_id": "box-c",
    "device": "RPC0[10.0.0.13:50100]",
    "endpoint": "10.0.0.13:50100",
    "budget": 48 * MiB,
    "used": 40 * MiB,
    "layers": 5,
    "lease_id": "0123456789abcdef",
}


def _with_remote(route: Route) -> None:
    answer = route.fetch()
    status = answer.json()
    status["remote_devices"] = [REMOTE]
    route.fulfill(response=answer, body=json.dumps(status))


def test_the_overview_lists_a_remote_device_with_budget_use_and_runtime(ui: GuardedPage) -> None:
    ui.page.route("**/router/v1/status", _with_remote)
    ui.goto("/router/ui/overview")
    remote = ui.page.get_by_role("table", name="Remote devices (memory lent by other nodes)")
    row = remote.locator("tbody tr")
    expect(row).to_have_count(1)
    cells = [c.strip() for c in row.locator("th, td").all_inner_texts()]
    assert cells == ["RPC0[10.0.0.13:50100]", "box-c", "text:spread", "48.0 MiB", "40.0 MiB", "5"]
    ui.shot("overview-remote")


def test_no_remote_device_no_table(ui: GuardedPage) -> None:
    ui.goto("/router/ui/overview")
    expect(ui.page.locator("#connection")).to_have_text("connected")
    expect(ui.page.get_by_role("table", name="Runtimes per lane")).to_be_visible()
    expect(
        ui.page.get_by_role("table", name="Remote devices (memory lent by other nodes)")
    ).to_have_count(0)
