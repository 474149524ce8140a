"""The master's half of forwarding: a request for a model whose chosen replica is on a slave.

The request goes to `<node url>/router/v1/node/inference<path>` with the model selector
rewritten to the node's local ID, an allow-list of headers and the cluster token in place of the
client's credential; the answer streams back as it comes (SSE stays SSE), model IDs rewritten
to the public ID. The node that serves records the analytics event, so the master records none.
A node that cannot be reached is marked unhealthy and, when nothing reached it, the request
tries the next replica.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from aiohttp import web
from multidict import CIMultiDict

from router.api.common import arrived
from router.appkeys import CLUSTER, PROXY, RUNTIMES, SETTINGS
from router.cluster import ClusterService, Target
from router.errors import BadGateway
from router.forwarding import (
    ModelRewriter,
    ProxyResult,
    Rewrite,
    Selection,
    UpstreamRequest,
    body_stream,
)
from router.forwarding.selector import SELECTOR_HEADER

INFERENCE_PREFIX = "/router/v1/node/inference"

# Request headers that carry meaning for the work itself; everything else stays on this hop.
_FORWARDED_HEADERS = frozenset(
    {
        "accept", "accept-encoding", "accept-language", "cache-control", "content-encoding",
        "content-language", "content-type", "if-match", "if-none-match",
        "if-modified-since", "if-unmodified-since", "range", "user-agent", "x-request-id",
    }
)  # fmt: skip


def remote_target(request: web.Request, selection: Selection) -> Target | None:
    """The remote replica this request goes to, or None when this node serves it."""
    if request.app[SETTINGS].cluster.role != "master" or selection.model is None:
        return None
    service = request.app[CLUSTER]
    public = service.find(selection.model)
    if public is None:
        return None
    local = public.replica_on(service.registry.own_node)
    busy = local is not None and _busy(request, local.local_id)
    target = service.target(public, busy)
    if target is None:
        raise BadGateway(
            f"model {public.public_id!r} has no available replicas", code="no_available_replica"
        )
    return None if target.replica.local else target


def _busy(request: web.Request, config_id: str) -> bool:
    return any(
        v.config.id == config_id and (v.leases > 0 or v.queued > 0 or not v.ready)
        for v in request.app[RUNTIMES].views()
    )


def _headers(
    request: web.Request, token: str, selection: Selection, local_id: str
) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in request.headers.items():
        if name.lower() in _FORWARDED_HEADERS:
            out.add(name, value)
    if selection.source == "header":
        out[SELECTOR_HEADER] = local_id
    out["Authorization"] = f"Bearer {token}"
    return out


def _path_qs(request: web.Request, selection: Selection, local_id: str) -> str:
    url = request.rel_url
    if selection.source and selection.source.startswith("query:"):
        url = url.update_query({selection.source.split(":", 1)[1]: local_id})
    return INFERENCE_PREFIX + url.raw_path_qs


async def relay(
    request: web.Request, selection: Selection, target: Target, result: ProxyResult
) -> web.StreamResponse:
    """Send the request to the target's node; on an unreachable node, the next replica."""
    service = request.app[CLUSTER]
    tried: set[str] = set()
    while True:
        tried.add(target.replica.node_id)
        try:
            return await _relay_once(request, selection, target, result, service)
        except BadGateway as err:
            if result.upstream_status is not None or not selection.complete:
                raise
            assert target.node_url is not None
            service.registry.poll_failed(target.node_url, err.message, time.time())
            service.forget()
            following = remote_target(request, selection)
            if following is None or following.replica.node_id in tried:
                raise
            target = following


async def _relay_once(
    request: web.Request,
    selection: Selection,
    target: Target,
    result: ProxyResult,
    service: ClusterService,
) -> web.StreamResponse:
    if target.node_url is None:
        raise BadGateway(f"node {target.replica.node_id!r} is not registered")
    local_id = target.replica.local_id
    rewriter = ModelRewriter(target.public.public_id, local_id)
    body: bytes | AsyncIterator[bytes] | None = None
    prefix = rewriter.request_body(selection.prefix) if selection.prefix else b""
    if selection.complete:
        body = prefix or None
    else:  # the selector sat in the prefix; the rest streams through untouched
        rest = Selection(selection.model, prefix, False, selection.source)
        body = body_stream(rest, request)
    url = service.client.url(target.node_url, _path_qs(request, selection, local_id))
    token = request.app[SETTINGS].cluster.token or ""
    headers = _headers(request, token, selection, local_id)
    # Never replayed by the proxy itself: an unreachable node is retried here, on another one.
    upstream = UpstreamRequest(request.method, url, headers, body, False)
    result.bytes_in, result.relayed = len(prefix), True
    started = arrived(request)

    def overhead_ms() -> float:
        return max(0.0, (time.monotonic() - started) * 1000.0 - (result.ttfb_ms or 0.0))

    response = await request.app[PROXY].forward(
        request, upstream, Rewrite(rewriter), result, overhead_ms
    )
    if result.error_message is not None:  # the node went away mid-answer (R33)
        service.registry.poll_failed(target.node_url, result.error_message, time.time())
        service.forget()
    return response
