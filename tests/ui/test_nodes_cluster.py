"""The Nodes page on a master: every registered node with its health and last contact, and a
slave's runtimes read through the master by node id."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.cluster import Cluster, cluster, listed_ids, start_all
from tests.support.harness import RouterHarness, until
from tests.ui.conftest import GuardedPage, UiRouter


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Cluster]:
    # Not the tmp_harness fixture (tests/conftest.py): its no-survivor check would count the session's
    # browser processes; each router here is killed at the end and its backends with it (R4).
    h = RouterHarness(tmp_path / "cluster")
    h.routers = []  # type: ignore[attr-defined]
    c = cluster(h, {"a": b"A"}, {"b": b"B"})

    async def up() -> None:
        await start_all(c)
        async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
            assert await until(lambda: listed_ids(client), ["a", "b"])

    # Its own thread: Playwright's sync API may already run an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, up()).result()
    try:
        yield c
    finally:
        for node in (c.master, *c.slaves):
            node.kill()


def test_the_nodes_page_shows_the_cluster(two_nodes: Cluster, page: Page, tmp_path: Path) -> None:
    master = two_nodes.master
    ui = GuardedPage(page, UiRouter(master, master.h), tmp_path)
    ui.goto("/router/ui/nodes")
    expect(page.locator("h1")).to_have_text("Nodes")
    row = page.locator("main table").first.locator("tbody tr", has_text="s1")
    expect(row).to_contain_text("reachable")
    expect(row).not_to_contain_text("never")  # the master's polls keep its last contact
    # The slave's runtimes, through the master: nothing yet, then the model a chat loaded.
    row.get_by_role("link", name="s1").click()
    expect(page.get_by_role("heading", name="Runtimes on s1")).to_be_visible()
    expect(page.locator("main")).to_contain_text("Nothing is loaded.")
    chat = {"model": "b", "messages": [{"role": "user", "content": "hi"}]}
    assert (
        httpx.post(master.base + "/v1/chat/completions", json=chat, timeout=30).status_code == 200
    )
    page.get_by_role("button", name="Refresh").click()
    runtimes = page.locator("main table", has_text="Runtimes of s1")
    expect(runtimes.locator("tbody tr", has_text="b")).to_contain_text("ready")
    ui.check()
