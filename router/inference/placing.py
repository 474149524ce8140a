"""The facts a forwarded request is placed on (router/cluster/placement.py decides): the pinned
node of a follow-up, the cluster's chosen replica, the lending links that hold a relayed model,
a selectorless embedding request's rotation, images for a model that cannot read them; and the
relay of a request placed on another node."""

from __future__ import annotations

import functools

from aiohttp import web

from router.cluster import Target, carries_images, has_vision
from router.cluster.placement import Local, Relay, RelayFacts, place
from router.config import ModelConfig
from router.domain import Lane
from router.edge import matched_route
from router.forwarding import ProxyResult, Selection
from router.inference.embeddings_relay import embeddings_target
from router.inference.override import Override
from router.inference.pins import pinned_target, pinning
from router.inference.relay import relay, remote_target
from router.lending import BORROWED, LENDING, Link

Facts = RelayFacts[Target, Link]


async def gather(
    request: web.Request, override: Override, lane: Lane, facts: Facts | None
) -> Facts:
    """The facts of a request: the handler's own (`facts`), a selectorless embedding request's
    rotation, else `relay_facts`."""
    if (
        facts is None
        and override.selection.model is None
        and lane is Lane.EMBEDDINGS
        and override.relayable
        and request.get(BORROWED) is None
    ):
        facts = await _embeddings_facts(request)
    return facts or relay_facts(request, override)


def relay_facts(request: web.Request, override: Override) -> Facts:
    """The data a relay is decided on: the pinned node of a follow-up, the cluster's chosen
    replica and the lending links that hold a relayed slave model. Borrowed work (lent to
    this node, the master's own included) is served here, never relayed."""
    selection, lane = override.selection, matched_route(request).lane or Lane.TEXT
    pinned = pinned_target(request, override.follow) if override.follow else None
    relayable = override.relayable and request.get(BORROWED) is None and pinned is None
    chosen = replica(request, selection) if relayable else None
    held: tuple[Link, ...] = ()
    if chosen is not None and override.plain:
        held = tuple(request.app[LENDING].owner.lendable_remote(request, selection, chosen, lane))
    return RelayFacts(pinned, chosen, relayable, held, override.remember)


async def _embeddings_facts(request: web.Request) -> Facts | None:
    """Selectorless embeddings on a master: another node's loaded runtime in the rotation
    (router/api/node/embeddings_relay.py); None when this node serves it."""
    target = await embeddings_target(request)
    return None if target is None else RelayFacts(chosen=target, relayable=True)


def relay_target(request: web.Request, override: Override) -> Target | None:
    """The node a request served outside `forward` goes to (a realtime WebSocket session is
    relayed whole), or None when this node serves it: the same placement."""
    facts = relay_facts(request, override)
    placement = place(facts, None) if facts.relays else Local()
    return placement.target if isinstance(placement, Relay) else None


def replica(request: web.Request, selection: Selection) -> Target | None:
    """The cluster registry's replica for the named model; None: this node's (the one place
    the registry is asked, for a request's placement and for a relay's next replica)."""
    return remote_target(request, selection)


async def relay_placed(
    request: web.Request,
    selection: Selection,
    placement: Relay[Target, Link],
    result: ProxyResult,
) -> web.StreamResponse:
    """A request placed on another node: relayed there, or held here until lent or relayed
    (a slave's linked model)."""
    target = placement.target
    watch = pinning(request, target, placement.remember) if placement.remember else None
    following = functools.partial(replica, request, selection)
    to_owner = functools.partial(relay, request, selection, target, result, watch, following)
    if placement.held:  # a slave's linked model: held here until lent or relayed to its owner
        lending = request.app[LENDING]
        return await lending.owner.hold_then_relay(
            request, selection, placement.held, result, to_owner
        )
    return await to_owner()


def needs_guardian(config: ModelConfig, selection: Selection) -> bool:
    """Images sent to a model that cannot read them (a cheap byte scan first)."""
    return bool(selection.prefix) and not has_vision(config) and carries_images(selection.prefix)
