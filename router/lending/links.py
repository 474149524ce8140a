"""Lending links (docs/lending.md): an owner model on one node lends queued work to a helper
model on another. Pure: eligibility, the site body, replacing an anchor's links. No I/O; the
handlers feed these functions what they saw. Pricing and leases: pricing.py, leases.py,
planning.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from router.cluster import NodeModel, RuntimeStatus
from router.config import LendingSettings
from router.errors import BadRequest

LANES = ("text", "image")
MAX_LINKS = 64  # per anchor and list: a link editor, not a bulk import


@dataclass(frozen=True, slots=True)
class Link:
    """One-way: requests for the owner's model may be served by the helper's model."""

    lane: str
    owner_node_id: str
    owner_model_id: str
    helper_node_id: str
    helper_model_id: str
    load_if_unloaded: bool = True
    restore_after_borrow: bool = False

    @property
    def owner(self) -> tuple[str, str]:
        return (self.owner_node_id, self.owner_model_id)

    @property
    def helper(self) -> tuple[str, str]:
        return (self.helper_node_id, self.helper_model_id)

    def touches(self, lane: str, anchor: tuple[str, str]) -> bool:
        return self.lane == lane and anchor in (self.owner, self.helper)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lane": self.lane,
            "owner": {"node_id": self.owner_node_id, "model_id": self.owner_model_id},
            "helper": {"node_id": self.helper_node_id, "model_id": self.helper_model_id},
            "load_if_unloaded": self.load_if_unloaded,
            "restore_after_borrow": self.restore_after_borrow,
        }


@dataclass(frozen=True, slots=True)
class Side:
    """What eligibility reads of one model: where it is and what its configuration states."""

    node_id: str
    model_id: str
    lanes: frozenset[str]
    context_length: int | None = None
    parallel: int | None = None
    multimodal: bool = False

    @classmethod
    def of(cls, node_id: str, model: NodeModel) -> Side:
        return cls(
            node_id,
            model.local_id,
            frozenset(str(lane) for lane in model.lanes),
            model.context_length,
            model.parallel,
            model.multimodal,
        )


def ineligible_reason(lane: str, owner: Side, helper: Side) -> str | None:
    """Why `helper` cannot take `owner`'s work on `lane`, or None when it can."""
    if owner.node_id == helper.node_id:
        return "same_node"
    if lane not in owner.lanes or lane not in helper.lanes:
        return "wrong_lane"
    if lane != "text":
        return None
    if owner.context_length is None or helper.context_length is None:
        return "context_unknown"
    if helper.context_length < owner.context_length:
        return "context_too_small"
    if owner.multimodal != helper.multimodal:
        return "multimodal_mismatch"
    if (owner.parallel or 1) > 1 or (helper.parallel or 1) > 1:
        return "parallel_slots"
    return None


def parse_links(
    body: Mapping[str, Any], lane: str, own_node: str
) -> tuple[tuple[str, str], tuple[Link, ...]]:
    """The anchor and the links a POST sets; any invalid entry refuses the whole body (400)."""
    anchor = _ref(body.get("anchor"), "anchor", own_node)
    links: list[Link] = []
    for name in ("lends_to", "borrows_from"):
        entries = body.get(name, [])
        if not isinstance(entries, list) or len(entries) > MAX_LINKS:
            raise BadRequest(f"{name} must be a list of at most {MAX_LINKS} entries", param=name)
        for index, entry in enumerate(entries):
            where = f"{name}[{index}]"
            other = _ref(entry, where, own_node)
            flags = (
                _flag(entry, "load_if_unloaded", True, where),
                _flag(entry, "restore_after_borrow", False, where),
            )
            owner, helper = (anchor, other) if name == "lends_to" else (other, anchor)
            links.append(Link(lane, *owner, *helper, *flags))
    seen: set[tuple[tuple[str, str], tuple[str, str]]] = set()
    for link in links:
        if (link.owner, link.helper) in seen:
            raise BadRequest("the same link is listed twice", param="lends_to")
        seen.add((link.owner, link.helper))
    return anchor, tuple(links)


def _ref(value: Any, where: str, own_node: str) -> tuple[str, str]:
    if not isinstance(value, dict):
        raise BadRequest(f'{where} must be an object {{"node_id", "model_id"}}', param=where)
    if "node_url" in value:
        raise BadRequest("name the node by node_id, never an address", param="node_url")
    node_id = value.get("node_id") or own_node
    model_id = value.get("model_id")
    if not isinstance(node_id, str) or not 0 < len(node_id) <= 64:
        raise BadRequest(f"{where}.node_id must be a node id", param=where)
    if not isinstance(model_id, str) or not 0 < len(model_id) <= 256:
        raise BadRequest(f"{where}.model_id must be a non-empty string", param=where)
    return node_id, model_id


def _flag(entry: Mapping[str, Any], name: str, default: bool, where: str) -> bool:
    value = entry.get(name, default)
    if not isinstance(value, bool):
        raise BadRequest(f"{where}.{name} must be true or false", param=where)
    return value


def replace_links(
    links: Iterable[Link], lane: str, anchor: tuple[str, str], new: Iterable[Link]
) -> tuple[Link, ...]:
    """Every link of `anchor` on `lane` (as owner or helper) replaced by `new`."""
    kept = [link for link in links if not link.touches(lane, anchor)]
    return tuple(kept) + tuple(new)


class LinkTable:
    """The links in force on this node, replaced whole on a change (requests read lock-free)."""

    def __init__(self, links: Iterable[Link] = ()) -> None:
        self.links: tuple[Link, ...] = tuple(links)
        # Helper side: borrowed requests being served here per lane (not this node's own work).
        self.borrowed: dict[str, int] = {}
        # Owner side: each helper node's last runtime status and when it came (monotonic).
        self.seen: dict[str, tuple[float, RuntimeStatus | None]] = {}

    def owned(self, lane: str, node_id: str, model_id: str) -> tuple[Link, ...]:
        """The links over which `model_id` on `node_id` lends (empty for most models)."""
        if not self.links:
            return ()
        return tuple(
            link for link in self.links if link.lane == lane and link.owner == (node_id, model_id)
        )

    def borrows_from(self, lane: str, node_id: str, model_id: str) -> tuple[Link, ...]:
        return tuple(
            link for link in self.links if link.lane == lane and link.helper == (node_id, model_id)
        )


class LendingValues:
    """The lending settings in force (`cluster.scheduling_*` / `cluster.offload_*`): readers
    take `.values` once per decision; a saved batch replaces it whole."""

    def __init__(self, values: LendingSettings) -> None:
        self.values = values
