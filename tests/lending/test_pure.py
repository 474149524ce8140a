"""Lending links, the pure parts (router/lending/links.py): eligibility, the site body with
its all-or-nothing rule, and replacing an anchor's links
(pricing, leases and planning: tests/lending/test_plan.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.errors import BadRequest
from router.lending.links import Link, Side, ineligible_reason, parse_links, replace_links
from router.lending.wire import owner_header, parse_owner


def side(node: str = "a", model: str = "m", **kw: Any) -> Side:
    fields: dict[str, Any] = {"lanes": frozenset({"text"}), "context_length": 4096}
    fields.update(kw)
    return Side(node, model, **fields)


@pytest.mark.parametrize(
    ("owner", "helper", "lane", "reason"),
    [
        (side(), side("b"), "text", None),
        (side(), side("a", "other"), "text", "same_node"),
        (side(), side("b"), "image", "wrong_lane"),
        (side(), side("b", lanes=frozenset({"image"})), "text", "wrong_lane"),
        (side(context_length=None), side("b"), "text", "context_unknown"),
        (side(), side("b", context_length=None), "text", "context_unknown"),
        (side(context_length=8192), side("b"), "text", "context_too_small"),
        (side(), side("b", context_length=8192), "text", None),
        (side(multimodal=True), side("b"), "text", "multimodal_mismatch"),
        (side(), side("b", multimodal=True), "text", "multimodal_mismatch"),
        (side(multimodal=True), side("b", multimodal=True), "text", None),
        (side(parallel=4), side("b"), "text", "parallel_slots"),
        (side(), side("b", parallel=2), "text", "parallel_slots"),
        (side(parallel=1), side("b", parallel=1), "text", None),
        # The image lane has no context or slot rule.
        (
            side(lanes=frozenset({"image"}), context_length=None),
            side("b", lanes=frozenset({"image"}), context_length=None, parallel=3),
            "image",
            None,
        ),
    ],
)
def test_eligibility_table(owner: Side, helper: Side, lane: str, reason: str | None) -> None:
    assert ineligible_reason(lane, owner, helper) == reason


def test_body_sets_both_directions_with_flags() -> None:
    body = {
        "anchor": {"node_id": "m", "model_id": "slow"},
        "lends_to": [{"node_id": "s1", "model_id": "fast", "load_if_unloaded": False}],
        "borrows_from": [{"node_id": "s2", "model_id": "x", "restore_after_borrow": True}],
    }
    anchor, links = parse_links(body, "text", "m")
    assert anchor == ("m", "slow")
    assert links == (
        Link("text", "m", "slow", "s1", "fast", load_if_unloaded=False),
        Link("text", "s2", "x", "m", "slow", restore_after_borrow=True),
    )
    # The node id defaults to this node.
    anchor, links = parse_links({"anchor": {"model_id": "slow"}}, "image", "m")
    assert anchor == ("m", "slow") and links == ()


GOOD = {"node_id": "s1", "model_id": "fast"}
BAD_ENTRIES: list[Any] = [
    "fast",
    {"node_id": "s1"},
    {"node_id": "s1", "model_id": ""},
    {"node_id": "s1", "model_id": 3},
    {"node_id": "s1", "model_id": "f", "load_if_unloaded": "yes"},
    {"node_id": "s1", "model_id": "f", "restore_after_borrow": 1},
    {"node_url": "http://x", "model_id": "f"},
    {"node_id": "x" * 65, "model_id": "f"},
]


@given(
    bad=st.sampled_from(BAD_ENTRIES),
    before=st.integers(0, 3),
    after=st.integers(0, 3),
    key=st.sampled_from(["lends_to", "borrows_from"]),
)
def test_one_invalid_entry_refuses_the_whole_body(
    bad: Any, before: int, after: int, key: str
) -> None:
    good = [{"node_id": f"s{i}", "model_id": "fast"} for i in range(before)]
    more = [{"node_id": f"t{i}", "model_id": "fast"} for i in range(after)]
    body = {"anchor": {"model_id": "slow"}, key: [*good, bad, *more]}
    with pytest.raises(BadRequest):
        parse_links(body, "text", "m")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"anchor": "slow"},
        {"anchor": {"model_id": "slow"}, "lends_to": {"model_id": "x"}},
        {"anchor": {"model_id": "slow"}, "lends_to": [GOOD, GOOD]},
        {"anchor": {"model_id": "slow"}, "lends_to": [GOOD] * 65},
    ],
)
def test_malformed_bodies(body: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        parse_links(body, "text", "m")


def test_replace_touches_only_the_anchor_on_its_lane() -> None:
    mine = Link("text", "m", "slow", "s1", "fast")
    borrowed = Link("text", "s2", "y", "m", "slow")
    other = Link("text", "m", "else", "s1", "fast")
    image = Link("image", "m", "slow", "s1", "fast")
    new = Link("text", "m", "slow", "s3", "z")
    out = replace_links([mine, borrowed, other, image], "text", ("m", "slow"), [new])
    assert set(out) == {other, image, new}
    assert set(replace_links(out, "text", ("m", "slow"), [])) == {other, image}


_NODE = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1)


def _bare(text: str) -> bool:
    return text == text.strip() and text != ""


@given(_NODE.filter(_bare), st.text(min_size=1).filter(_bare))
def test_the_owner_header_round_trips(node_id: str, model_id: str) -> None:
    assert parse_owner(owner_header(node_id, model_id)) == (node_id, model_id)


@given(st.sampled_from(["", "m", "/slow", "m/", " / ", "mslow"]))
def test_a_malformed_owner_header_is_refused(value: str) -> None:
    with pytest.raises(BadRequest, match="X-Tensors-Offload-Owner"):
        parse_owner(value)
