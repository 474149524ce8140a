"""The pipeline of one forwarded request: parse -> place -> lease -> forward -> record
(DESIGN.md section 5, docs/architecture.md).

`forward` reads the selector (or takes a handler's `Override`, override.py), places the request
(placing.py: the facts, the one rule, the kind) and lets its kind serve it (kinds.py: relayed,
for the guardian, lent, served here, where serving.py leases and forwards); `forward_to` sends
to one known runtime. Every request is recorded once (`recorded`). `relayed` and `forward_here`
let a handler with a flow of its own for requests served here (images, speech) ask the
placement first, and `followed` sends a follow-up to the node that made its id, without the
handler gathering placement facts itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from aiohttp import web
from multidict import CIMultiDict

from router.appkeys import RECORDER, SETTINGS
from router.classify import Route
from router.domain import MiB
from router.edge import arrived, caller_of, matched_route
from router.errors import RequestTimeout, RouterError
from router.forwarding import (
    ModelRewriter,
    ProxyResult,
    Rewrite,
    Selection,
    UpstreamRequest,
    read_selector,
)
from router.inference import outgoing, traced
from router.inference.admission import admit
from router.inference.context import Context
from router.inference.override import Override, Pins, Prepare
from router.inference.pins import pinned_target
from router.inference.placing import Facts, placed, relay_facts
from router.inference.relay import stt_target
from router.lending import OFFLOAD_RETURNED
from router.records import RequestInfo
from router.runtime import Runtime, RuntimeView


async def forward(
    request: web.Request, override: Override | Selection | Prepare | None = None
) -> web.StreamResponse:
    """Forward one request; `override` when a handler already read (and kept) the body."""
    return await _forward(request, override, None)


async def forward_here(
    request: web.Request, override: Override | Selection | Prepare | None
) -> web.StreamResponse:
    """Forward a request `relayed` already placed on this node: served here."""
    return await _forward(request, override, Facts())


async def relayed(
    request: web.Request, selection: Selection, *, remember: str | None = None, stt: bool = False
) -> web.StreamResponse | None:
    """The answer of another cluster node when the request, as sent, is placed there; None
    when this node serves it. `remember`: the pin prefix of the ids its answer starts (an
    sd-server job); `stt`: a selectorless speech-to-text request may go to another node."""
    if stt and selection.model is None:
        target = await stt_target(request)
        if target is None:
            return None
        # Counted against its node by the relay itself (kinds.Relay), as every relayed request.
        return await _forward(request, selection, Facts(chosen=target, relayable=True))
    override = Override(selection, pins=Pins(remember=remember))
    facts = relay_facts(request, override)
    return await _forward(request, override, facts) if facts.relays else None


async def followed(
    request: web.Request, key: str, source: str, body: Callable[[], Awaitable[Selection]]
) -> web.StreamResponse | None:
    """A follow-up whose id another node made (a stored response, an sd-server job): forwarded
    to that node as sent, under the model name the node knows; None when no node holds the pin
    `key`. `body` reads what the client sent (only once the follow-up goes there)."""
    target = pinned_target(request, key)
    if target is None:
        return None
    sent = await body()
    selection = Selection(target.public.public_id, sent.prefix, sent.complete, source)
    return await _forward(request, Override(selection, pins=Pins(follow=key)), None)


async def _forward(
    request: web.Request, override: Override | Selection | Prepare | None, facts: Facts | None
) -> web.StreamResponse:
    route = matched_route(request)
    info = _info(request, route)
    async with recorded(request, info) as result:
        parsed = await _parse(request, route, override)
        admit(request, parsed.selection.model)
        ctx, kind = await placed(Context(request, route, info, result, parsed), facts)
        return await kind.serve(ctx)


async def _parse(
    request: web.Request, route: Route, override: Override | Selection | Prepare | None
) -> Override:
    """What is sent: the handler's `Override` (made now when it is a `Prepare`, so its
    refusals are recorded), else the body's model selector."""
    if isinstance(override, Selection):
        return Override(override)
    if callable(override):
        return await override()
    return override or Override(await _read_selector(request, route))


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
            outgoing.headers(request) if headers is None else CIMultiDict(headers),
            body,
            not isinstance(body, AsyncIterator),
        )
        overhead = outgoing.overhead(info, result, 0.0)
        return await traced.called(
            request, upstream, IDENTITY, result, overhead, info.model or "", family.value
        )


@contextlib.asynccontextmanager
async def recorded(request: web.Request, info: RequestInfo) -> AsyncIterator[ProxyResult]:
    """One analytics event for what happens inside, however it ends."""
    result = ProxyResult()
    returned = False
    async with traced.routed(request, info) as span:
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
            traced.answered(span, info, result)
            # A request another node answered is recorded there; one that reached none, here.
            if not returned and not (result.relayed and result.upstream_status is not None):
                _record(request, info, result)
            elif info.key_name:  # recorded there; its tokens count against the key here
                request.app[RECORDER].relayed(
                    info, result.status or 500, result.aborted, result.tail
                )


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
    info = RequestInfo(
        route.template, route.surface.value, _lane_name(route), arrived(request), time.time()
    )
    # The key's name: a scoped key here, or the master's caller on a relayed request.
    info.key_name = caller_of(request).name or None
    return info


IDENTITY = Rewrite(ModelRewriter("", ""))


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


def _lane_name(route: Route) -> str | None:
    return route.lane.value if route.lane else None
