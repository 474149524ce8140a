"""Scoped keys across the cluster (issue 35): a request the master relays to a node carries
its key's name and class (`X-Router-Caller`, with the cluster token, never the secret); the
node records and orders it as that key's. The header from anyone else is ignored. The master
runs in this process, the node is a real `tensor-router start` process."""

from __future__ import annotations

from typing import Any

import httpx

from router.domain import Caller, Priority
from router.keys import CALLER_HEADER, caller_header, parse_caller
from tests.support.cluster import master_here, slave_of
from tests.support.harness import RouterHarness, chat, free_port, until


async def _keys_seen_on_s1(client: httpx.AsyncClient) -> list[Any]:
    await client.post("/router/v1/site/analytics/flush", params={"node": "s1"})
    summary = await client.get("/router/v1/site/analytics", params={"node": "s1"})
    if summary.status_code != 200:
        return []
    return sorted((k["key"] or "", k["requests"]) for k in summary.json().get("keys", []))


async def test_a_relayed_request_carries_its_key_name_to_the_node(
    tmp_harness: RouterHarness,
) -> None:
    master_port = free_port()
    slave_url = await slave_of(tmp_harness, master_port, {"b": b"B"})
    async with master_here(tmp_harness, master_port, slave_url) as client:

        async def b_listed() -> bool:
            return "b" in [m["id"] for m in (await client.get("/v1/models")).json()["data"]]

        assert await until(b_listed, True)
        made = await client.post("/router/v1/keys", json={"name": "agent", "priority": "batch"})
        secret = made.json()["secret"]
        r = await client.post(
            "/v1/chat/completions", json=chat("b"), headers={"Authorization": f"Bearer {secret}"}
        )
        assert r.status_code == 200, r.text
        # A client that names a caller itself, straight to the node, is nobody's key there.
        async with httpx.AsyncClient(base_url=slave_url, timeout=30) as direct:
            spoof = await direct.post(
                "/v1/chat/completions", json=chat("b"), headers={CALLER_HEADER: "boss interactive"}
            )
            assert spoof.status_code == 200, spoof.text

        async def seen() -> list[Any]:
            return await _keys_seen_on_s1(client)

        assert await until(seen, [("", 1), ("agent", 1)]), await seen()
        # The master counted the relayed request's tokens against the key (its quota).
        listed = (await client.get("/router/v1/keys")).json()["data"]
        assert listed[0]["tokens_today"] >= 1


def test_the_caller_header_round_trips_and_refuses_what_is_not_a_caller() -> None:
    for caller in (Caller("agent", Priority.BATCH), Caller("chat.1", Priority.INTERACTIVE, 4)):
        assert parse_caller(caller_header(caller)) == caller
    for bad in (None, "", "agent", "agent urgent", "-x batch", "a batch 0", "a batch x", "a b c d"):
        assert parse_caller(bad) is None
