"""The master pushes its lending settings and its link table to a slave (docs/lending.md), two
real routers on loopback: on registration (a restarted slave gets them again), after a save,
after a link change; and the master relays the decision log of a slave named by node_id."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import httpx
import yaml

from router import __version__
from tests.support.cluster import AUTH
from tests.support.harness import RouterHarness, until
from tests.support.lending import LINK, TEXT_LINKS, slave_known, two_nodes
from tests.support.router_process import RouterProcess

NODE_SETTINGS = "/router/v1/node/offload/settings"
NODE_LINKS = "/router/v1/node/routing-links"
SITE_SETTINGS = "/router/v1/site/offload/settings"
DECISIONS = "/router/v1/site/offload/decisions"


def with_own_values(node: RouterProcess, **values: Any) -> None:
    """The slave's own config file sets lending values (the master's pushed ones win)."""
    config = yaml.safe_load(node.config.read_text())
    config["cluster"].update(values)
    node.config.write_text(yaml.safe_dump(config))


async def slave_state(slave: RouterProcess) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=10) as c:
        settings = (await c.get(NODE_SETTINGS)).json()
        links = (await c.get(NODE_LINKS)).json()["links"]
    return settings, links


async def slave_value(slave: RouterProcess, key: str) -> Any:
    settings, _ = await slave_state(slave)
    return settings["settings"][key] if settings["pushed"] else None


async def slave_links(slave: RouterProcess) -> list[tuple[str, str, str, str, str]]:
    _, links = await slave_state(slave)
    return [
        (
            k["lane"],
            k["owner_node_id"],
            k["owner_model_id"],
            k["helper_node_id"],
            k["helper_model_id"],
        )
        for k in links
    ]


SLOW_TO_FAST = [("text", "m", "slow", "s1", "fast")]


async def test_settings_and_links_reach_the_slave_and_come_back_after_its_restart(
    tmp_harness: RouterHarness,
) -> None:
    master, slave = two_nodes(tmp_harness)
    with_own_values(slave, scheduling_backend_depth=7, offload_probe_idle="9s")
    await master.start()
    await slave.start()
    async with httpx.AsyncClient(base_url=slave.base, timeout=10) as c:
        assert (await c.get(NODE_SETTINGS)).status_code == 401  # cluster token only
        assert (await c.get(NODE_LINKS)).status_code == 401
    async with httpx.AsyncClient(base_url=master.base, timeout=30) as client:
        assert await until(lambda: slave_known(client), True)
        # Pushed on registration: the master's values (its file sets none) win over the
        # slave's file.
        assert await until(lambda: slave_value(slave, "scheduling_backend_depth"), 2)
        assert await slave_value(slave, "offload_probe_idle") == 5.0

        reply = await client.post(SITE_SETTINGS, json={"settings": {"scheduling_backend_depth": 4}})
        assert reply.status_code == 200, reply.text
        assert await until(lambda: slave_value(slave, "scheduling_backend_depth"), 4)

        assert (await client.post(TEXT_LINKS, json=LINK)).status_code == 200
        assert await until(lambda: slave_links(slave), SLOW_TO_FAST)
        reply = await client.delete(TEXT_LINKS, params={"node_id": "m", "model_id": "slow"})
        assert reply.status_code == 200, reply.text
        assert await until(lambda: slave_links(slave), [])
        assert (await client.post(TEXT_LINKS, json=LINK)).status_code == 200
        assert await until(lambda: slave_links(slave), SLOW_TO_FAST)

        # A restarted slave starts from its own file, then gets both again on registering.
        slave.kill()
        await slave.start()
        assert await until(lambda: slave_value(slave, "scheduling_backend_depth"), 4)
        assert await until(lambda: slave_links(slave), SLOW_TO_FAST)

        # Only a slave takes pushed state; a bad push is refused whole.
        async with httpx.AsyncClient(base_url=master.base, headers=AUTH, timeout=10) as node:
            refused = await node.post(NODE_SETTINGS, json={"settings": {}})
            assert refused.status_code == 400, refused.text
        async with httpx.AsyncClient(base_url=slave.base, headers=AUTH, timeout=10) as node:
            bad = await node.post(NODE_LINKS, json={"links": [{"lane": "voice"}]})
            assert bad.status_code == 400, bad.text
            bad = await node.post(NODE_SETTINGS, json={"settings": {"scheduling_backend_depth": 0}})
            assert (
                bad.status_code == 400
                and bad.json()["error"]["param"] == "scheduling_backend_depth"
            )
        assert await slave_links(slave) == SLOW_TO_FAST
        assert await slave_value(slave, "scheduling_backend_depth") == 4


async def test_the_master_relays_a_slaves_decision_log_by_node_id(
    tmp_harness: RouterHarness,
) -> None:
    master, slave = two_nodes(tmp_harness)
    await master.start()
    await slave.start()
    # A helper row in the slave's own store, as its helper side writes them.
    row = (
        time.time(),
        "helper",
        "",
        "borrowed_returned",
        json.dumps(["native_arrived"]),
        "text",
        "m",
        "slow",
        "s1",
        "fast",
        __version__,
        json.dumps({"queued": 1}),
    )
    with sqlite3.connect(tmp_harness.tmp / "data-s1" / "router.sqlite", timeout=10) as db:
        db.execute(
            'INSERT INTO offload_decisions (at, kind, "trigger", outcome, reasons, lane,'
            " owner_node_id, owner_model_id, helper_node_id, helper_model_id, router_version,"
            " detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )
    async with httpx.AsyncClient(base_url=master.base, timeout=30) as client:
        assert await until(lambda: slave_known(client), True)
        own = await client.get(DECISIONS)
        assert own.status_code == 200 and own.json() == {"decisions": [], "next_before": None}
        relayed = await client.get(DECISIONS, params={"node_id": "s1", "kind": "helper"})
        assert relayed.status_code == 200, relayed.text
        rows = relayed.json()["decisions"]
        assert [(r["outcome"], r["helper_model_id"], r["detail"]) for r in rows] == [
            ("borrowed_returned", "fast", {"queued": 1})
        ]
        bad = await client.get(DECISIONS, params={"node_id": "s1", "limit": "0"})
        assert bad.status_code == 400  # the slave's own 400, relayed
        assert (await client.get(DECISIONS, params={"node_id": "nope"})).status_code == 404
    async with httpx.AsyncClient(base_url=slave.base, timeout=10) as c:
        assert (await c.get(DECISIONS)).status_code == 404  # a site route: not on a slave
        assert (await c.get(SITE_SETTINGS)).status_code == 404
