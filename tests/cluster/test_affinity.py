"""Where the cache is, placement follows (docs/swaps.md): a returning conversation goes to the
replica that reports its prefix (router/cluster/replicas.affine, in `ClusterService.target`),
unless that replica is more than AFFINITY_SLACK requests busier than the least busy one."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from router.cluster import AllowList, ClusterService, NodeClient
from router.cluster.replicas import AFFINITY_SLACK, affine
from router.config.schema import ClusterSection
from router.conversations import held_length, parse
from tests.support.snapshots import model, snap

NODES = ("a", "b", "c")


def _chain(*contents: str) -> tuple[str, ...]:
    msgs = [{"role": "user", "content": c} for c in contents]
    prompt = parse("/v1/chat/completions", json.dumps({"messages": msgs}).encode())
    assert prompt is not None
    return prompt.chain


def _reported(*contents: str) -> str:
    chain = _chain(*contents)
    return f"{len(chain)}:{chain[-1]}"


@given(
    st.lists(st.integers(0, 3), min_size=3, max_size=3),
    st.lists(st.integers(0, 9), min_size=3, max_size=3),
)
def test_the_holder_of_the_longest_prefix_wins_within_the_slack(
    held: list[int], load: list[int]
) -> None:
    got = affine(list(range(3)), held.__getitem__, load.__getitem__)
    if max(held) == 0:
        assert got is None
        return
    longest = [i for i in range(3) if held[i] == max(held)]
    best = min(longest, key=lambda i: (load[i], i))
    if load[best] <= min(load) + AFFINITY_SLACK:
        assert got == best
    else:
        assert got is None  # much busier: the usual order decides


def test_a_worked_example() -> None:
    held = {"a": 0, "b": 3, "c": 0}.__getitem__
    assert affine(NODES, held, {"a": 0, "b": 2, "c": 1}.__getitem__) == "b"  # 2 <= 0 + 2
    assert affine(NODES, held, {"a": 0, "b": 3, "c": 1}.__getitem__) is None  # 3 > 0 + 2


def test_held_length_reads_reported_prefixes() -> None:
    chain = _chain("x", "y", "z")
    reported = [_reported("x"), _reported("x", "y"), _reported("q"), "junk", "9:nope"]
    assert held_length(chain, reported) == 3  # the settings unit, then x and y
    assert held_length(_chain("x", "edited", "z"), reported) == 2
    assert held_length(chain, []) == 0


async def test_the_service_sends_a_returning_conversation_where_its_prefix_is() -> None:
    section = ClusterSection(
        role="master",
        node_id="m",
        token="t" * 32,
        public_url="http://master:8080",
        slave_urls=tuple(f"http://{n}:8080" for n in NODES),
    )
    client = NodeClient(None, "", AllowList([]), 10.0)  # type: ignore[arg-type]  # never called
    service = ClusterService(section, client, tuple, lambda _: None)
    for node in NODES:
        prefixes = (_reported("story of " + node),)
        service.register(snap(node, f"http://{node}:8080", model("x", prefixes=prefixes)), 5.0)
    assert service._rebuild is not None
    await service._rebuild
    public = service.find("x")
    assert public is not None
    for node in ("c", "a", "b", "c"):  # each conversation returns to its node, in any order
        target = service.target(public, False, _chain("story of " + node, "go on"))
        assert target is not None and target.replica.node_id == node
    service.pending["b"] = AFFINITY_SLACK + 1  # b is kept busy: its conversation goes elsewhere
    target = service.target(public, False, _chain("story of b", "go on"))
    assert target is not None and target.replica.node_id != "b"
    rotation = [service.target(public, False, ()) for _ in range(3)]  # no prefix: rotation
    assert sorted(t.replica.node_id for t in rotation if t is not None) == ["a", "b", "c"]
