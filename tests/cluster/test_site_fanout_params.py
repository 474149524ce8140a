"""The master's merged site reads validate their query like the node's own route does: a bad
`limit` on the merged load-captures listing is a 400 naming the parameter (it was an
unvalidated `int(...)`, a 500, when the listing covered a slave). Real routers on loopback."""

from __future__ import annotations

import httpx

from tests.support.cluster import cluster, listed_ids, start_all
from tests.support.harness import RouterHarness, until


async def test_a_bad_limit_on_the_merged_captures_listing_is_a_400(
    tmp_harness: RouterHarness,
) -> None:
    c = cluster(tmp_harness, {"a": b"A"}, {"b": b"B"})
    await start_all(c)
    async with httpx.AsyncClient(base_url=c.master.base, timeout=30) as client:
        assert await until(lambda: listed_ids(client), ["a", "b"])
        for bad in ("abc", "0", "501", "1.5"):
            reply = await client.get("/router/v1/site/load-captures", params={"limit": bad})
            assert reply.status_code == 400, (bad, reply.text)
            assert reply.json()["error"]["param"] == "limit"
        # only a slave asked: the master's own route never sees the limit (the 500 it was)
        only = await client.get(
            "/router/v1/site/load-captures", params={"node": "s1", "limit": "x"}
        )
        assert only.status_code == 400 and only.json()["error"]["param"] == "limit"
        both = [("node", "m"), ("node", "s1"), ("limit", "x")]
        reply = await client.get("/router/v1/site/load-captures", params=both)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "limit"
        fine = await client.get("/router/v1/site/load-captures", params={"limit": "500"})
        assert fine.status_code == 200 and sorted(fine.json()["nodes"]) == ["m", "s1"]
        # the node filter is read one way: an address is refused before anything is called
        address = {"node": "s1", "node_url": "http://127.0.0.1:9"}
        refused = await client.get("/router/v1/site/load-captures", params=address)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "node_url"
