"""Issue 22: a site call whose route declares `names_node` is resolved by the master's
dispatcher before the handler runs. A real slave process answers the relayed call; the master
runs in this process so a spy can tell whether its handler ran."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import router.app
from router.classify import match
from router.config import Settings
from router.edge import listener
from tests.support.cluster import TOKEN, node_configs
from tests.support.harness import RouterHarness, free_port, until
from tests.support.router_process import new_router

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
    h = tmp_harness
    master_port, slave_port = free_port(), free_port()
    slave_url = f"http://127.0.0.1:{slave_port}"
    slave = new_router(
        h,
        name="s1",
        port=slave_port,
        kcpps_dir=node_configs(h, "s1", {"b": b"B"}),
        extra={
            "cluster": {
                "role": "slave",
                "node_id": "s1",
                "token": TOKEN,
                "public_url": slave_url,
                "master_url": f"http://127.0.0.1:{master_port}",
                "sync_interval": 0.5,
            }
        },
    )
    await slave.start()
    calls: list[str] = []
    monkeypatch.setitem(router.app.HANDLERS, "site.inventory", _spy(calls, "site.inventory"))
    h.model("a")
    base = h.settings().model_dump(mode="json")
    base["cluster"] = {
        "role": "master",
        "node_id": "m",
        "token": TOKEN,
        "public_url": f"http://127.0.0.1:{master_port}",
        "slave_urls": [slave_url],
        "health_interval": 0.3,
    }
    settings = Settings.model_validate(base)
    app = router.app.create_app(settings)
    server = TestServer(app, host="127.0.0.1", port=master_port, **listener.runner_kwargs(settings))
    await server.start_server()
    try:
        async with httpx.AsyncClient(base_url=server.make_url("").human_repr(), timeout=30) as c:
            await _relayed_before_the_handler(c, calls, slave_url)
    finally:
        await server.close()


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
