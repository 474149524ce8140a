"""The Nodes page on a master shows each node's memory (issue 25): the devices its snapshot
carries, with the bytes a slave's resident runtime holds. A master and a slave with a 48 MiB
host budget and a real demo GGUF (its estimate is real); the slave's model loaded over its
node route."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from router.demo_models import write_llama_gguf
from tests.support.cluster import AUTH, Cluster, cluster, start_all
from tests.support.harness import RouterHarness, until
from tests.ui.conftest import GuardedPage, UiRouter

MIB = 1 << 20


@pytest.fixture
def memory_nodes(tmp_path: Path) -> Iterator[Cluster]:
    h = RouterHarness(tmp_path / "cluster")
    h.routers = []  # type: ignore[attr-defined]
    write_llama_gguf(tmp_path / "chat.gguf", seed=1, name="chat")
    chat = (tmp_path / "chat.gguf").read_bytes()
    c = cluster(h, {}, {"chat": chat}, slave_sections={"memory": {"host_budget": "48MiB"}})

    async def up() -> None:
        await start_all(c)
        async with httpx.AsyncClient(timeout=30) as http:
            (s1,) = c.slaves
            r = await http.post(
                s1.base + "/router/v1/node/load", json={"model": "chat"}, headers=AUTH
            )
            assert r.status_code == 200, r.text

            async def measured() -> object:  # just after the load (docs/residency.md)
                rows = (await http.get(c.master.base + "/router/v1/models")).json()["data"]
                return [(r["memory"] or {}).get("source") for r in rows if r["id"] == "chat"]

            assert await until(measured, ["measured"])

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API may run a loop in this thread
        pool.submit(asyncio.run, up()).result()
    try:
        yield c
    finally:
        for node in (c.master, *c.slaves):
            node.kill()


def test_the_nodes_page_shows_each_nodes_memory(
    memory_nodes: Cluster, page: Page, tmp_path: Path
) -> None:
    master = memory_nodes.master
    ui = GuardedPage(page, UiRouter(master, master.h), tmp_path)
    nodes = {n["node_id"]: n for n in ui.router.get("/router/v1/site/inventory")["nodes"]}
    (host,) = [d for d in nodes["s1"]["devices"] if d["device"] == "host"]
    assert host["budget"] == 48 * MIB and host["used"] > 0
    ui.goto("/router/ui/nodes")
    memory = page.get_by_role("list", name="Memory of s1")
    expect(memory.locator('li[data-device="host"]')).to_have_text(
        f"host: {mib(host['used'])} used of 48.0 MiB, {mib(host['free'])} free"
    )
    expect(
        page.get_by_role("list", name="Memory of m").locator('li[data-device="host"]')
    ).to_contain_text("host: 0 B used of")
    ui.shot("nodes-memory")
    ui.check()


def mib(value: int) -> str:
    return f"{value / MIB:.1f} MiB"
