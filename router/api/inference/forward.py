"""The forwarding handler: select -> resolve -> lease -> forward -> record (DESIGN.md section 5).

`forward` reads the selector (or takes a handler's `Override`, override.py), chooses the model
(choice.py), places the request (placing.py: relayed, lent, or served here) and serves it
(serving.py); `forward_to` sends to one known runtime. Every request is recorded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Mapping

from aiohttp import web

from router.appkeys import PROXY, RECORDER, SETTINGS
from router.classify import Route
from router.cluster.placement import Guardian, Lend, LocalFacts, Relay, place
from router.domain import Lane, MiB
from router.edge import Handler, arrived, matched_route
from router.errors import RequestTimeout, RouterError
from router.forwarding import (
    ModelRewriter,
    ProxyResult,
    Rewrite,
    Selection,
    UpstreamRequest,
    read_selector,
)
from router.inference import outgoing
from router.inference.choice import choose
from router.inference.guardian import answering
from router.inference.override import Override, Prepare
from router.inference.placing import Facts, gather, needs_guardian, relay_placed, replica
from router.inference.relay import relay
from router.inference.serving import serve
from router.lending import LENDING, OFFLOAD_RETURNED, Link
from router.records import RequestInfo
from router.runtime import Runtime, RuntimeView


async def forward(
    request: web.Request,
    override: Override | Selection | Prepare | None = None,
    *,
    facts: Facts | None = None,
) -> web.StreamResponse:
    """Forward one request; `override` when a handler already read (and kept) the body;
    `facts` when the handler gathered them first (`relay_facts`), to pick its own local flow."""
    route = matched_route(request)
    info = _info(request, route)
    async with recorded(request, info) as result:
        if isinstance(override, Selection):
            override = Override(override)
        elif callable(override):
            override = await override()
        return await _forward(request, route, info, result, override, facts)


async def forward_to(
    request: web.Request,
    runtime: Runtime | RuntimeView,
    path_qs: str,
    body: bytes | AsyncIterator[bytes] | None,
    info: RequestInfo,
    *,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """Forward to one known runtime, no model selection and no lease (sd-server job polls,
    vLLM's operational routes, backend WebUIs under their caller's lease); recorded like
    every forwarded request. `headers` replaces the forwarded request headers."""
    family = runtime.family if isinstance(runtime, RuntimeView) else runtime.spec.family
    info.family = family.value
    async with recorded(request, info) as result:
        if isinstance(body, bytes):
            result.bytes_in = len(body)
        elif body is not None:
            body = outgoing.counted(body, *outgoing.stream_limits(request), result)
        upstream = UpstreamRequest(
            request.method,
            runtime.base_url + path_qs,
            outgoing.headers(request) if headers is None else headers,
            body,
            not isinstance(body, AsyncIterator),
        )
        return await request.app[PROXY].forward(
            request, upstream, IDENTITY, result, outgoing.overhead(info, result, 0.0)
        )


@contextlib.asynccontextmanager
async def recorded(request: web.Request, info: RequestInfo) -> AsyncIterator[ProxyResult]:
    """One analytics event for what happens inside, however it ends."""
    result = ProxyResult()
    returned = False
    try:
        yield result
    except asyncio.CancelledError:
        result.aborted, result.status = True, 499
        raise
    except RouterError as exc:
        result.status = result.status or exc.status
        result.error_message = result.error_message or exc.message
        # A lent request handed back to its owner is no request of this node's (lending.md).
        returned = exc.code == OFFLOAD_RETURNED
        raise
    finally:
        # A request another node answered is recorded there; one that reached none, here.
        if not returned and not (result.relayed and result.upstream_status is not None):
            _record(request, info, result)


def _record(request: web.Request, info: RequestInfo, result: ProxyResult) -> None:
    request.app[RECORDER].record(
        info,
        status=result.status or 500,
        upstream_status=result.upstream_status,
        error_message=result.error_message,
        ttfb_ms=result.ttfb_ms,
        bytes_in=result.bytes_in,
        bytes_out=result.bytes_out,
        aborted=result.aborted,
        tail=result.tail,
    )


def _info(request: web.Request, route: Route) -> RequestInfo:
    return RequestInfo(
        route.template, route.surface.value, _lane_name(route), arrived(request), time.time()
    )


IDENTITY = Rewrite(ModelRewriter("", ""))


async def _forward(
    request: web.Request,
    route: Route,
    info: RequestInfo,
    result: ProxyResult,
    override: Override | None,
    facts: Facts | None = None,
) -> web.StreamResponse:
    """Place the request (router/cluster/placement.py) and go there: relayed to another node,
    lent over a lending link, or served here."""
    if override is None:
        override = Override(await _read_selector(request, route))
    selection = override.selection
    lane = route.lane or Lane.TEXT
    lending = request.app[LENDING]
    facts = await gather(request, override, lane, facts)
    local = None
    config, public_id = None, ""
    if not facts.relays:  # a relayed model need not be configured here
        if override.here is not None:
            override = override.here()
            selection = override.selection
        config, public_id, lane = choose(request, route, selection, override.lane)
        info.model, info.lane = public_id, lane.value
        local = LocalFacts(
            (route.lane or Lane.TEXT) is Lane.TEXT and needs_guardian(config, selection),
            lending.owner.lendable(request, selection, config, lane) if override.plain else (),
        )
    placement = place(facts, local)
    if isinstance(placement, Relay):
        return await relay_placed(request, selection, placement, result)
    assert config is not None
    if override.unleased is not None:
        response = await override.unleased(config, lane)
        result.status = response.status
        return response
    links: tuple[Link, ...] = ()
    if isinstance(placement, Guardian):
        config, target = answering(request, config, info)
        if target is not None:
            following = functools.partial(replica, request, selection)
            return await relay(request, selection, target, result, None, following)
        # The guardian answers here; its own lending links may still lend it.
        links = lending.owner.lendable(request, selection, config, lane) if override.plain else ()
    elif isinstance(placement, Lend):
        links = placement.links
    if links:
        lent = await _lend(request, selection, links, info, result)
        if lent is not None:
            return lent
    if lending.helper.ungated(request, config, lane):
        return await serve(request, route, info, result, override, config, public_id, lane)
    with lending.owner.finishing(links):
        async with lending.helper.serving(request, config, lane):
            return await serve(request, route, info, result, override, config, public_id, lane)


async def _read_selector(request: web.Request, route: Route) -> Selection:
    """The body's model selector (and what was read of the body to find it)."""
    scan_limit = int(request.app[SETTINGS].limits.selector_scan_mb * MiB)
    idle = request.app[SETTINGS].server.header_timeout
    try:
        async with asyncio.timeout(idle):  # S2: a body that trickles in is refused
            return await read_selector(request, route, scan_limit)
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {idle:g}s (server.header_timeout)"
        ) from None


async def _lend(
    request: web.Request,
    selection: Selection,
    links: tuple[Link, ...],
    info: RequestInfo,
    result: ProxyResult,
) -> web.StreamResponse | None:
    """Offered over the lending links first (docs/lending.md); None: served here after all."""
    held_from = time.monotonic()
    lent = await request.app[LENDING].owner.lend(request, selection, links, result)
    if lent is None:
        # Held time is waiting, not work: the cost fits read duration less queue wait.
        info.queue_wait_ms += (time.monotonic() - held_from) * 1000.0
    return lent


def _lane_name(route: Route) -> str | None:
    return route.lane.value if route.lane else None


HANDLERS: dict[str, Handler] = {"proxy": forward}
