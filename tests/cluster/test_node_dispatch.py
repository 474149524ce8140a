"""Issue 22: a site call whose route declares `names_node` is resolved by the master's
dispatcher before the handler runs. A real slave process answers the relayed call; the master
runs in this process so a spy can tell whether its handler ran."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

import router.app
from router.classify import match
from tests.support.cluster import master_here, slave_of
from tests.support.harness import RouterHarness, free_port, until

INVENTORY = "/router/v1/site/inventory"


def _spy(calls: list[str], name: str) -> Callable[[web.Request], Any]:
    handler = router.app.HANDLERS[name]

    async def spy(request: web.Request) -> web.StreamResponse:
        calls.append(request.query.get("node_id", ""))
        return await handler(request)

    return spy


async def test_a_declared_route_naming_the_slave_is_relayed_before_the_handler(
    tmp_harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert match("GET", INVENTORY).route.names_node
    master_port = free_port()
    slave_url = await slave_of(tmp_harness, master_port, {"b": b"B"})
    calls: list[str] = []
    monkeypatch.setitem(router.app.HANDLERS, "site.inventory", _spy(calls, "site.inventory"))
    async with master_here(tmp_harness, master_port, slave_url) as client:
        await _relayed_before_the_handler(client, calls, slave_url)


async def _relayed_before_the_handler(
    client: httpx.AsyncClient, calls: list[str], slave_url: str
) -> None:

    async def slave_answers() -> int:
        return (await client.get(INVENTORY, params={"node_id": "s1"})).status_code

    assert await until(slave_answers, 200)
    calls.clear()
    remote = await client.get(INVENTORY, params={"node_id": "s1"})
    assert remote.status_code == 200, remote.text
    assert remote.json()["node_id"] == "s1"
    assert [m["id"] for m in remote.json()["models"]] == ["b"]
    assert calls == []  # relayed by the dispatcher: the master's handler never ran

    local = await client.get(INVENTORY, params={"node_id": "m"})
    assert local.status_code == 200 and local.json()["node_id"] == "m"
    own = await client.get(INVENTORY)
    assert own.status_code == 200 and own.json()["node_id"] == "m"
    assert calls == ["m", ""]

    unknown = await client.get(INVENTORY, params={"node_id": "nope"})
    assert unknown.status_code == 404 and "unknown node" in unknown.text
    address = await client.get(INVENTORY, params={"node_url": slave_url})
    assert address.status_code == 400 and address.json()["error"]["param"] == "node_url"
    assert calls == ["m", ""]  # neither reached the handler: the dispatcher refused them
