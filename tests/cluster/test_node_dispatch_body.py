"""Issue 22: a management call that names its node in the JSON body (`names_node=body`), or by
the `node` filters of a read over the nodes' records (`filter`), is resolved by the master's
dispatcher before the handler runs: the body is read once (capped), then relayed whole to the
slave or handed to the master's own handler. A real slave process answers the relayed calls;
the master runs in this process so a spy can tell whether its handler ran.

Bodies arrive the way a network delivers them: in several pieces with pauses (chunked and
with an honest Content-Length), and large ones (hundreds of KB, with `node_id` at the very
end, so only the whole body names the node).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiohttp import web

import router.app
from router.classify import NamesNode, match
from router.edge import ADDRESSED
from tests.forwarding.test_split_bodies import FRAMINGS, cut, post_split
from tests.support.cluster import master_here, slave_of
from tests.support.harness import RouterHarness, free_port, until

pytestmark = pytest.mark.timeout(300)

UNLOAD = "/router/v1/site/nodes/unload"
LOAD_ERRORS = "/router/v1/site/load-errors"
FLUSH = "/router/v1/site/analytics/flush"
STORE_DOWNLOAD = "/router/v1/site/store/download"
CAP_MB = 1  # the master's limits.max_control_body_mb
LARGE = 400_000  # bytes of padding: a large body, well under the cap


@dataclass
class Master:
    client: httpx.AsyncClient
    calls: list[str]  # the node id each spied handler run was addressed to
    slave_url: str


def _spy(calls: list[str], name: str) -> Callable[[web.Request], Any]:
    handler = router.app.HANDLERS[name]

    async def spy(request: web.Request) -> web.StreamResponse:
        calls.append(request.get(ADDRESSED, "-"))
        return await handler(request)

    return spy


@pytest.fixture
async def master(
    tmp_harness: RouterHarness, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Master]:
    master_port = free_port()
    slave_url = await slave_of(tmp_harness, master_port, {"b": b"B"})
    calls: list[str] = []
    for name in ("site.nodes_unload", "site.load_errors"):
        monkeypatch.setitem(router.app.HANDLERS, name, _spy(calls, name))
    limits = {"max_control_body_mb": CAP_MB}
    async with master_here(tmp_harness, master_port, slave_url, limits=limits) as client:

        async def slave_answers() -> int:
            r = await client.get("/router/v1/site/inventory", params={"node_id": "s1"})
            return r.status_code

        assert await until(slave_answers, 200)
        yield Master(client, calls, slave_url)


def _unload(node_id: str | None, pad: int = 0) -> bytes:
    """A nodes/unload body; `node_id` last, after `pad` bytes of a field no handler reads."""
    body: dict[str, Any] = {"pad": "x" * pad, "lane": "all"} if pad else {"lane": "all"}
    if node_id is not None:
        body["node_id"] = node_id
    return json.dumps(body).encode()


async def test_a_body_naming_the_slave_is_relayed_before_the_handler(master: Master) -> None:
    assert match("POST", UNLOAD).route.names_node is NamesNode.BODY
    client, calls = master.client, master.calls

    remote = await client.post(UNLOAD, content=_unload("s1"))
    assert remote.status_code == 200, remote.text
    assert remote.json() == {"node_id": "s1", "lane": "all", "model": None, "unloaded": []}
    assert calls == []  # relayed by the dispatcher: the master's handler never ran

    for node_id in ("m", None):
        local = await client.post(UNLOAD, content=_unload(node_id))
        assert local.status_code == 200 and local.json()["node_id"] == "m", local.text
    # The query names the node when the body does not; the body wins over the query.
    by_query = await client.post(UNLOAD, params={"node_id": "s1"}, content=_unload(None))
    assert by_query.json()["node_id"] == "s1"
    body_wins = await client.post(UNLOAD, params={"node_id": "s1"}, content=_unload("m"))
    assert body_wins.json()["node_id"] == "m"
    assert calls == ["m", "m", "m"]

    calls.clear()
    unknown = await client.post(UNLOAD, content=_unload("nope"))
    assert unknown.status_code == 404 and "unknown node" in unknown.text
    address = await client.post(UNLOAD, json={"lane": "all", "node_url": master.slave_url})
    assert address.status_code == 400 and address.json()["error"]["param"] == "node_url"
    not_json = await client.post(UNLOAD, content=b'{"node_id": "s1", ')
    assert not_json.status_code == 400 and "not valid JSON" in not_json.text
    not_a_string = await client.post(UNLOAD, json={"lane": "all", "node_id": 7})
    assert not_a_string.status_code == 400 and not_a_string.json()["error"]["param"] == "node_id"
    # The slave's own answer to a bad body comes back as it is (its handler checks the fields).
    refused = await client.post(UNLOAD, json={"node_id": "s1"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "lane"
    assert calls == []  # none of these reached the master's handler


@pytest.mark.parametrize("framing", FRAMINGS)
async def test_a_body_in_pieces_names_its_node_and_arrives_whole(
    master: Master, framing: str
) -> None:
    client, calls = master.client, master.calls
    for node_id, pieces in (("s1", 4), ("m", 4), ("s1", 6)):
        body = _unload(node_id, pad=LARGE if pieces == 6 else 2_000)
        r = await post_split(client, UNLOAD, cut(body, pieces), framing)
        assert r.status_code == 200, (node_id, r.text)
        # `lane` answered back: the handler that ran (the slave's or the master's) parsed the
        # whole body the dispatcher read, not a first piece.
        assert r.json()["node_id"] == node_id and r.json()["lane"] == "all", r.text
    assert calls == ["m"]

    # Large, in one ordinary client write, for each node.
    for node_id in ("s1", "m"):
        r = await client.post(UNLOAD, content=_unload(node_id, pad=LARGE))
        assert r.status_code == 200 and r.json()["node_id"] == node_id, r.text


@pytest.mark.parametrize("framing", FRAMINGS)
async def test_a_body_over_the_cap_is_refused_before_any_node_is_asked(
    master: Master, framing: str
) -> None:
    too_large = _unload("s1", pad=CAP_MB * 1024 * 1024 + 1)
    r = await post_split(master.client, UNLOAD, cut(too_large, 5), framing)
    # Chunked: the dispatcher's read stops at the cap; a declared length over it is refused by
    # the edge's size cap before the body is read.
    assert r.status_code == 413 and f"larger than {CAP_MB * 1024 * 1024} bytes" in r.text, r.text
    assert master.calls == []


async def test_a_filter_naming_one_node_is_relayed_and_none_merges_every_node(
    master: Master,
) -> None:
    assert match("GET", LOAD_ERRORS).route.names_node is NamesNode.FILTER
    client, calls = master.client, master.calls
    for name in ("node", "node_id"):
        remote = await client.get(LOAD_ERRORS, params={name: "s1"})
        assert remote.status_code == 200 and remote.json()["nodes"] == ["s1"], remote.text
    assert calls == []
    own = await client.get(LOAD_ERRORS, params={"node": "m"})
    assert own.status_code == 200 and own.json()["nodes"] == ["m"]
    merged = await client.get(LOAD_ERRORS)
    assert merged.status_code == 200 and merged.json()["nodes"] == ["m", "s1"], merged.text
    assert calls == ["m", "m"]  # the merge asked its own handler, then the slave
    unknown = await client.get(LOAD_ERRORS, params={"node": "nope"})
    assert unknown.status_code == 404
    several = await client.get(LOAD_ERRORS, params=[("node", "m"), ("node", "s1")])
    assert several.status_code == 400 and "one node at a time" in several.text
    # A write over the nodes' records: the filter picks the one node that flushes.
    flushed = await client.post(FLUSH, params={"node": "s1"})
    assert flushed.status_code == 200 and flushed.json()["persisted"] == ["s1"], flushed.text
    everyone = await client.post(FLUSH)
    assert sorted(everyone.json()["persisted"]) == ["m", "s1"], everyone.text


async def test_a_query_naming_the_slave_streams_its_store(master: Master) -> None:
    assert match("GET", STORE_DOWNLOAD).route.names_node is NamesNode.QUERY
    r = await master.client.get(STORE_DOWNLOAD, params={"node_id": "s1"})
    assert r.status_code == 200, r.text
    assert 'filename="analytics-s1-' in r.headers["Content-Disposition"]
    assert r.content.startswith(b"SQLite format 3\x00")
