"""The place step: the facts a forwarded request is placed on (the pinned node of a follow-up,
the cluster's chosen replica, the lending links that hold a relayed model, a selectorless
embedding request's rotation, images for a model that cannot read them, the lending links that
cover a model served here), the one rule that places it (router/cluster/placement.py) and the
kind that serves it there (router/inference/kinds.py)."""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from router.appkeys import LENDING
from router.cluster import Asked, Target, carries_images, has_vision
from router.cluster import placement as rule
from router.cluster.placement import LocalFacts, RelayFacts, place
from router.config import ModelConfig
from router.domain import Lane
from router.edge import matched_route
from router.forwarding import Selection
from router.inference.choice import choose
from router.inference.context import Chosen, Context, Kind, lent_of
from router.inference.embeddings_relay import embeddings_target
from router.inference.kinds import Guardian, Lend, Local, Relay, Unleased
from router.inference.override import Override
from router.inference.pins import pinned_target
from router.inference.relay import remote_target
from router.lending import Link

Facts = RelayFacts[Target, Link]


async def placed(ctx: Context, facts: Facts | None = None) -> tuple[Context, Kind]:
    """Place the request and name the kind that serves it; the context the kind gets is the
    one the handler made, or (served here) its `here` form. `facts`: already gathered."""
    facts = await gather(ctx.http, ctx.override, ctx.route.lane or Lane.TEXT, facts)
    if facts.relays:  # a relayed model need not be configured here
        return ctx, kind_of(place(facts, None), None)
    if ctx.override.here is not None:
        ctx = replace(ctx, override=ctx.override.here())
    chosen = _choose(ctx)
    if ctx.override.serving.unleased is not None:
        return ctx, Unleased(chosen)
    return ctx, kind_of(place(facts, _local_facts(ctx, chosen)), chosen)


def kind_of(placement: rule.Placement[Target, Link], chosen: Chosen | None) -> Kind:
    """The kind that serves a placement; `chosen` is None only for a relay."""
    if isinstance(placement, rule.Relay):
        return Relay(placement)
    assert chosen is not None
    if isinstance(placement, rule.Guardian):
        return Guardian(chosen)
    if isinstance(placement, rule.Lend):
        return Lend(chosen, placement.links)
    return Local(chosen)


def _choose(ctx: Context) -> Chosen:
    """The configuration that serves it here; the analytics row names it from now on."""
    config, public_id, lane = choose(ctx.http, ctx.route, ctx.selection, ctx.override.serving.lane)
    ctx.info.model, ctx.info.lane = public_id, lane.value
    return Chosen(config, public_id, lane)


def _local_facts(ctx: Context, chosen: Chosen) -> LocalFacts[Link]:
    """What decides among this node's ways: images for a text-only model (asked on the text
    routes only) and the lending links that cover a request forwarded as sent."""
    text = (ctx.route.lane or Lane.TEXT) is Lane.TEXT
    owner = ctx.http.app[LENDING].owner
    links: tuple[Link, ...] = ()
    if ctx.override.plain and ctx.lent is None:  # a borrowed request is never lent on
        links = owner.lendable(ctx.asked, ctx.selection, chosen.config, chosen.lane)
    return LocalFacts(text and needs_guardian(chosen.config, ctx.selection), links)


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
        and lent_of(request) is None
    ):
        facts = await _embeddings_facts(request)
    return facts or relay_facts(request, override)


def relay_facts(request: web.Request, override: Override) -> Facts:
    """The data a relay is decided on: the pinned node of a follow-up, the cluster's chosen
    replica and the lending links that hold a relayed slave model. Borrowed work (lent to
    this node, the master's own included) is served here, never relayed."""
    selection, lane = override.selection, matched_route(request).lane or Lane.TEXT
    pinned = pinned_target(request, override.pins.follow) if override.pins.follow else None
    relayable = override.relayable and lent_of(request) is None and pinned is None
    chosen = remote_target(request, selection) if relayable else None
    held: tuple[Link, ...] = ()
    if chosen is not None and override.plain:
        owner = request.app[LENDING].owner
        held = tuple(owner.lendable_remote(Asked.of(request), selection, chosen, lane))
    return RelayFacts(pinned, chosen, relayable, held, override.pins.remember)


async def _embeddings_facts(request: web.Request) -> Facts | None:
    """Selectorless embeddings on a master: another node's loaded runtime in the rotation
    (router/inference/embeddings_relay.py); None when this node serves it."""
    target = await embeddings_target(request)
    return None if target is None else RelayFacts(chosen=target, relayable=True)


def relay_target(request: web.Request, selection: Selection) -> Target | None:
    """The node a request served outside `forward` goes to, as sent (a realtime WebSocket
    session is relayed whole), or None when this node serves it: the same placement."""
    facts = relay_facts(request, Override(selection))
    placement = place(facts, None) if facts.relays else rule.Local()
    return placement.target if isinstance(placement, rule.Relay) else None


def needs_guardian(config: ModelConfig, selection: Selection) -> bool:
    """Images sent to a model that cannot read them (a cheap byte scan first)."""
    return bool(selection.prefix) and not has_vision(config) and carries_images(selection.prefix)
