"""The placement kinds: how a request is served once placed (router/cluster/placement.py
decides, router/inference/placing.py picks the kind). Each has one `serve(ctx)`.

- `Relay`: another node serves it as sent (held here first when lending links cover it);
- `Guardian`: the named model cannot read the request's images; its guardian answers, on
  another node or here (where its own lending links may lend it);
- `Lend`: offered to a helper node over lending links first, else served here;
- `Local`: served here, gated by the helper side of lending when this node lends itself out;
- `Unleased`: answered for the chosen model without leasing a runtime (Ollama's unload).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace

from aiohttp import web

from router.appkeys import CLUSTER, LENDING
from router.cluster import Target
from router.cluster import placement as rule
from router.inference.context import Chosen, Context, Kind
from router.inference.guardian import answering
from router.inference.pins import pinning
from router.inference.relay import relay, remote_target
from router.inference.serving import serve
from router.lending import Answer, Link


@dataclass(frozen=True)
class Local:
    chosen: Chosen
    links: tuple[Link, ...] = ()  # the lending links it was offered over and not taken

    async def serve(self, ctx: Context) -> web.StreamResponse:
        lent, (config, lane) = ctx.lent, (self.chosen.config, self.chosen.lane)
        lending = ctx.http.app[LENDING]
        if lending.helper.ungated(lent, config, lane):
            return await serve(ctx, self.chosen)
        with lending.owner.finishing(self.links):
            async with lending.helper.serving(lent, config, lane):
                return await serve(ctx, self.chosen)


@dataclass(frozen=True)
class Lend:
    chosen: Chosen
    links: tuple[Link, ...]

    async def serve(self, ctx: Context) -> web.StreamResponse:
        """Offered over the lending links first (docs/lending.md); else served here."""
        held_from = time.monotonic()
        owner = ctx.http.app[LENDING].owner
        lent = await owner.lend(ctx.asked, ctx.selection, self.links, ctx.result)
        if lent is not None:
            return rendered(lent)
        # Held time is waiting, not work: the cost fits read duration less queue wait.
        ctx.info.queue_wait_ms += (time.monotonic() - held_from) * 1000.0
        return await Local(self.chosen, self.links).serve(ctx)


@dataclass(frozen=True)
class Guardian:
    chosen: Chosen  # the text-only model the client named

    async def serve(self, ctx: Context) -> web.StreamResponse:
        request, selection = ctx.http, ctx.selection
        config, target = answering(request, self.chosen.config, ctx.info)
        if target is not None:
            following = functools.partial(remote_target, request, selection)
            return await relay(request, selection, target, ctx.result, None, following)
        # The guardian answers here; its own lending links may still lend it.
        chosen = replace(self.chosen, config=config)
        lending = request.app[LENDING]
        plain = ctx.override.plain and ctx.lent is None  # a borrowed one is never lent on
        links = lending.owner.lendable(ctx.asked, selection, config, chosen.lane) if plain else ()
        here: Kind = Lend(chosen, tuple(links)) if links else Local(chosen)
        return await here.serve(ctx)


@dataclass(frozen=True)
class Relay:
    placed: rule.Relay[Target, Link]

    async def serve(self, ctx: Context) -> web.StreamResponse:
        """Relayed to another node, or held here until lent or relayed (a slave's linked
        model)."""
        request, selection, target = ctx.http, ctx.selection, self.placed.target
        remember = self.placed.remember
        watch = pinning(request, target, remember) if remember else None
        following = functools.partial(remote_target, request, selection)

        async def to_owner() -> web.StreamResponse:
            # Counted against its node until the answer ends, so the next placement sees it
            # (the conversation affinity's bound, the speech-to-text choice; issue 33).
            with request.app[CLUSTER].reserved(target.replica.node_id):
                return await relay(request, selection, target, ctx.result, watch, following)

        if not self.placed.held:
            return await to_owner()
        owner, held = request.app[LENDING].owner, self.placed.held
        # Held here while the owner is busy: lent to a helper, else relayed to its owner node.
        lent = await owner.lend(ctx.asked, selection, held, ctx.result)
        if lent is not None:
            return rendered(lent)
        with owner.relaying(held):
            return await to_owner()


@dataclass(frozen=True)
class Unleased:
    chosen: Chosen

    async def serve(self, ctx: Context) -> web.StreamResponse:
        unleased = ctx.override.serving.unleased
        assert unleased is not None
        response = await unleased(self.chosen.config, self.chosen.lane)
        ctx.result.status = response.status
        return response


def rendered(answer: Answer) -> web.Response:
    """A helper's whole answer to a lent request, as the client's response."""
    out = web.Response(status=answer.status, body=answer.body)
    if answer.content_type:
        out.headers["Content-Type"] = answer.content_type
    return out
