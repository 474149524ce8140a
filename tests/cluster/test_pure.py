"""The cluster's pure parts: URL normal form, identity merging, replica choice, the registry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.cluster import (
    PROTOCOL_VERSION,
    AllowList,
    NodeModel,
    Registry,
    Snapshot,
    SttNode,
    choose_replica,
    choose_stt_node,
    merge,
    normalize_base_url,
    protocol_problem,
    public_image_id,
)
from router.errors import ClusterError, DuplicateNode
from tests.support.snapshots import model, snap


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("HTTP://Box:80/", "http://box"),
        ("https://box:443/r/", "https://box/r"),
        ("http://box:8081", "http://box:8081"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("http://box./", "http://box"),
    ],
)
def test_normal_form(url: str, normal: str) -> None:
    assert normalize_base_url(url) == normal


@pytest.mark.parametrize(
    "url",
    ["ftp://box", "file:///etc/passwd", "http://u:p@box", "http://box/?a=1", "http://box#x", "box"],
)
def test_unusable_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        normalize_base_url(url)


def test_allow_list_checks_scheme_host_port_and_path() -> None:
    allowed = AllowList(["http://box:8081/r"])
    assert allowed.allows("http://BOX:8081/r/router/v1/node/models")
    assert allowed.allows("http://box:8081/r")
    assert not allowed.allows("https://box:8081/r/x")
    assert not allowed.allows("http://box:8082/r/x")
    assert not allowed.allows("http://box:8081/rx")
    assert not allowed.allows("http://evilbox:8081/r/x")
    assert not allowed.allows("http://box.evil:8081/r/x")
    assert not allowed.allows("not a url")


def test_same_identity_is_one_model_with_replicas() -> None:
    merged = merge("m", [("m", [model("qwen")]), ("a", [model("qwen")]), ("b", [model("qwen")])])
    assert [p.public_id for p in merged] == ["qwen"]
    assert [r.node_id for r in merged[0].replicas] == ["m", "a", "b"]
    assert merged[0].replicas[0].local


def test_conflicting_identities_get_suffixes_with_own_node_first() -> None:
    nodes = [
        ("b", [model("qwen", h="hb")]),
        ("a", [model("qwen", h="ha")]),
        ("m", [model("qwen", h="hm")]),
    ]
    merged = {p.public_id: p for p in merge("m", nodes)}
    assert merged["qwen"].replicas[0].node_id == "m"
    assert merged["qwen-2"].replicas[0].node_id == "a"
    assert merged["qwen-3"].replicas[0].node_id == "b"


def test_suffix_skips_an_existing_id() -> None:
    nodes = [("m", [model("qwen"), model("qwen-2", h="x")]), ("a", [model("qwen", h="other")])]
    ids = sorted(p.public_id for p in merge("m", nodes))
    assert ids == ["qwen", "qwen-2", "qwen-3"]


def test_records_without_hashes_never_merge() -> None:
    merged = merge("m", [("m", [NodeModel(local_id="x")]), ("a", [NodeModel(local_id="x")])])
    assert sorted(p.public_id for p in merged) == ["x", "x-2"]


def test_disabled_records_are_left_out() -> None:
    assert merge("m", [("m", [model("x", disabled=True)])]) == []


def test_public_image_id() -> None:
    assert public_image_id("flux", "flux", "flux-img") == "flux-img"
    assert public_image_id("flux", "flux-2", "flux-img") == "flux-2-img"
    assert public_image_id("flux", "flux-2", "sdxl") == "flux-2-sdxl"
    assert public_image_id("flux", "flux-2", None) is None


_ids = st.sampled_from(["a", "b", "c"])
_records = st.lists(
    st.tuples(st.sampled_from(["m", "n1", "n2"]), _ids, st.sampled_from(["h1", "h2"])),
    max_size=12,
)


@given(_records)
def test_merge_is_stable_and_ids_unique(records: list[tuple[str, str, str]]) -> None:
    by_node: dict[str, list[NodeModel]] = {}
    for node, local_id, h in records:
        by_node.setdefault(node, []).append(model(local_id, h=h))
    once = merge("m", list(by_node.items()))
    again = merge("m", list(reversed(list(by_node.items()))))
    assert [(p.public_id, [(r.node_id, r.local_id) for r in p.replicas]) for p in once] == [
        (p.public_id, [(r.node_id, r.local_id) for r in p.replicas]) for p in again
    ]
    ids = [p.public_id for p in once]
    assert len(ids) == len(set(ids))
    assert sum(len(p.replicas) for p in once) == len(records)


def test_replica_choice_order() -> None:
    here, a, b = "here", "a", "b"
    assert choose_replica(here, False, [a, b], 0) == here
    assert [choose_replica(here, True, [a, b], t) for t in range(3)] == [a, b, a]
    assert choose_replica(here, True, [], 5) == here
    assert choose_replica(None, False, [b], 4) == b
    assert choose_replica(None, False, [], 0) is None


def test_the_merged_split_feeds_the_choice() -> None:
    """PublicModel.local is the available local replica; available_remote the rest."""
    nodes = [
        ("m", [model("x", available=False)]),
        ("a", [model("x")]),
        ("b", [model("x", available=False)]),
        ("c", [model("x")]),
    ]
    [public] = merge("m", nodes)
    assert public.local is None
    assert [r.node_id for r in public.available_remote()] == ["a", "c"]
    [up] = merge("m", [("m", [model("x")]), ("a", [model("x")])])
    assert up.local is not None and up.local.node_id == "m"


def stt(node_id: str, local: bool = False, **kw: object) -> SttNode:
    fields = {"capable": True, "has_loaded": False, "active": 0, "queued": 0} | kw
    return SttNode(node_id, local, **fields)  # type: ignore[arg-type]


def test_stt_tiers() -> None:
    here_loaded = stt("m", True, has_loaded=True, active=3)
    far_loaded_busy = stt("a", has_loaded=True, active=2)
    far_loaded_quiet = stt("b", has_loaded=True, active=1)
    assert choose_stt_node([far_loaded_quiet, here_loaded], 0) is here_loaded
    assert choose_stt_node([far_loaded_busy, far_loaded_quiet], 0) is far_loaded_quiet
    idle = stt("c")
    here_busy = stt("m", True, active=1)
    assert choose_stt_node([idle, here_busy], 0) is idle
    assert choose_stt_node([here_busy, stt("d", queued=1)], 0) is here_busy
    far = [stt("d", queued=2, active=1), stt("e", queued=1, active=4)]
    assert choose_stt_node(far, 0) is far[1]
    silent = stt("f", has_loaded=True, answered_status=False)
    assert choose_stt_node([silent], 0) is None


def test_stt_ties_rotate() -> None:
    idle = [stt("a"), stt("b")]
    assert [choose_stt_node(idle, t).node_id for t in range(3)] == ["a", "b", "a"]  # type: ignore[union-attr]


def registry() -> Registry:
    return Registry("m", "http://master:8080", ("http://a:8080", "http://b:8080"))


def test_registration_accepts_configured_urls_only() -> None:
    reg = registry()
    entry = reg.register(snap("a", "HTTP://A:8080/", model("x")), now=1.0)
    assert (entry.node_url, entry.healthy, entry.last_contact) == ("http://a:8080", True, 1.0)
    with pytest.raises(ClusterError) as err:
        reg.register(snap("z", "http://z:8080"), now=2.0)
    assert err.value.status == 400 and "slave_urls" in err.value.message
    assert [n.node_id for n in reg.nodes()] == ["a"]


@pytest.mark.parametrize(
    ("node_id", "url"),
    [("m", "http://b:8080"), ("a", "http://b:8080"), ("b", "http://a:8080")],
)
def test_identity_conflicts_leave_the_registry_unchanged(node_id: str, url: str) -> None:
    reg = registry()
    reg.register(snap("a", "http://a:8080", model("x")), now=1.0)
    before = [n.view() for n in reg.nodes()]
    with pytest.raises(DuplicateNode) as err:
        reg.register(snap(node_id, url), now=2.0)
    assert (err.value.status, err.value.code) == (409, "duplicate_node")
    assert [n.view() for n in reg.nodes()] == before


def test_master_url_is_not_a_slave() -> None:
    reg = Registry("m", "http://a:8080", ("http://a:8080",))
    with pytest.raises(DuplicateNode):
        reg.register(snap("a", "http://a:8080"), now=1.0)


def test_protocol_mismatch_names_the_side_to_update() -> None:
    assert protocol_problem(PROTOCOL_VERSION, peer="x") is None
    assert "update tensor-router on x" in (protocol_problem(0, peer="x") or "")
    assert "on this node" in (protocol_problem(PROTOCOL_VERSION + 1, peer="x") or "")
    with pytest.raises(ClusterError) as err:
        registry().register(snap("a", "http://a:8080", protocol=0), now=1.0)
    assert err.value.code == "protocol_mismatch"


def test_failed_poll_makes_models_unavailable_until_a_good_one() -> None:
    reg = registry()
    reg.polled("http://a:8080", snap("a", "http://elsewhere", model("x")), now=1.0)
    assert reg.node("a").node_url == "http://a:8080"  # type: ignore[union-attr]
    assert reg.public_models([])[0].replicas[0].model.available
    reg.poll_failed("http://a:8080", "connection refused", now=2.0)
    [public] = reg.public_models([])
    assert not public.replicas[0].model.available
    assert reg.node("a").error == "connection refused"  # type: ignore[union-attr]
    reg.polled("http://a:8080", snap("a", "http://a:8080", model("x")), now=3.0)
    assert reg.public_models([])[0].replicas[0].model.available


def test_a_poll_that_changes_identity_marks_the_node_unhealthy() -> None:
    reg = registry()
    reg.polled("http://a:8080", snap("a", "http://a:8080"), now=1.0)
    reg.polled("http://b:8080", snap("a", "http://b:8080"), now=2.0)
    entry = next(n for n in reg.nodes() if n.node_url == "http://b:8080")
    assert not entry.healthy and "already registered" in (entry.error or "")


def test_the_master_is_not_held_to_the_per_peer_cap() -> None:
    """A slave's master relays every client's work: its connections are not capped per peer."""
    from router.config import Settings
    from router.edge.connection_caps import ConnectionGuard

    guard = ConnectionGuard(Settings.model_validate({"server": {"max_connections_per_peer": 2}}))
    guard.cluster_peers = frozenset({"10.0.0.1"})
    for _ in range(5):
        assert guard.refusal("10.0.0.1") is None
        guard.admit("10.0.0.1")
    guard.admit("10.0.0.2")
    guard.admit("10.0.0.2")
    assert guard.refusal("10.0.0.2") is not None


async def test_a_slave_resolves_its_master_once() -> None:
    from router.config import Settings
    from router.server import _master_addresses

    slave = Settings.model_validate(
        {
            "cluster": {
                "role": "slave",
                "node_id": "s",
                "token": "t" * 32,
                "master_url": "http://127.0.0.1:8080",
                "public_url": "http://127.0.0.1:8081",
            }
        }
    )
    assert await _master_addresses(slave) == {"127.0.0.1"}
    assert await _master_addresses(Settings()) == frozenset()


async def test_the_node_client_reads_a_large_answer_sent_in_pieces() -> None:
    """A 200-model snapshot (hundreds of KB) written in several pieces with pauses is read to
    its end, not cut at what happened to be buffered."""
    import asyncio
    import json

    import aiohttp
    from aiohttp import web

    from router.cluster import NodeClient
    from tests.support.harness import free_port

    models = [{"local_id": f"model-{i:03d}", "filename": "x" * 1500} for i in range(200)]
    body = json.dumps(
        {
            "protocol": PROTOCOL_VERSION,
            "node_id": "a",
            "node_url": "http://127.0.0.1",
            "models": models,
        }
    ).encode()
    assert len(body) > 300_000

    async def snapshot(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"Content-Type": "application/json"})
        await reply.prepare(request)
        for start in range(0, len(body), 64_000):
            await reply.write(body[start : start + 64_000])
            await asyncio.sleep(0.02)
        await reply.write_eof()
        return reply

    app = web.Application()
    app.router.add_get("/router/v1/node/models", snapshot)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            client = NodeClient(session, "t", AllowList([base]), 10.0)
            answer = await client.call("GET", base, "/router/v1/node/models")
        assert Snapshot.model_validate(answer).models[-1].local_id == "model-199"
    finally:
        await runner.cleanup()
