"""W12 (this node): the Nodes page lists the inventory's nodes and this node's runtimes live."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.ui.conftest import BULK_MODELS, GuardedPage


def test_nodes_lists_this_node_and_follows_its_runtimes(ui: GuardedPage) -> None:
    inventory = ui.router.get("/router/v1/site/inventory")
    ui.goto("/router/ui/nodes")
    nodes = ui.page.get_by_role("table", name="1 node(s), role standalone")
    row = nodes.locator("tbody tr")
    expect(row).to_have_count(len(inventory["nodes"]))
    expect(row.first).to_contain_text(inventory["node_id"])
    expect(row.first).to_contain_text("reachable")
    expect(row.first.get_by_role("link", name=str(BULK_MODELS))).to_be_visible()
    runtimes = ui.page.get_by_role("table", name=f"Runtimes of {inventory['node_id']}")
    expect(runtimes).to_contain_text("Nothing is loaded.")
    ui.router.post("/router/v1/load", {"model": "alpha"})
    expect(runtimes.locator("tbody tr").first).to_contain_text("ready")
    expect(runtimes.locator("tbody tr").first).to_contain_text("alpha")
