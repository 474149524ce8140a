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
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from router.appkeys import CATALOG, CLUSTER, PROXY, RUNTIMES, SETTINGS
from router.cluster import (
    Asked,
    ClusterService,
    SttNode,
    Target,
    choose_stt_node,
    node_headers,
    node_path_qs,
)
from router.domain import Lane
from router.edge import arrived
from router.errors import BadGateway
from router.forwarding import (
    ModelRewriter,
    ProxyResult,
    Rewrite,
    Selection,
    UpstreamRequest,
    body_stream,
)
from router.inference import traced

OWN_MODEL = traced.OWN + "model"


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


async def relay(
    request: web.Request,
    selection: Selection,
    target: Target,
    result: ProxyResult,
    watch: Callable[[ModelRewriter], ModelRewriter] | None = None,
    following: Callable[[], Target | None] | None = None,
) -> web.StreamResponse:
    """Send the request to the target's node; on an unreachable node, the next replica the
    placement chooses (`following`; none: the error stands)."""
    service = request.app[CLUSTER]
    tried: set[str] = set()
    while True:
        tried.add(target.replica.node_id)
        try:
            return await _relay_once(request, selection, target, result, service, watch)
        except BadGateway as err:
            if result.upstream_status is not None or not selection.complete:
                raise
            assert target.node_url is not None
            service.node_failed(target.node_url, err.message)
            after = following() if following is not None else None
            if after is None or after.replica.node_id in tried:
                raise
            target = after


async def _relay_once(
    request: web.Request,
    selection: Selection,
    target: Target,
    result: ProxyResult,
    service: ClusterService,
    watch: Callable[[ModelRewriter], ModelRewriter] | None,
) -> web.StreamResponse:
    if target.node_url is None:
        raise BadGateway(f"node {target.replica.node_id!r} is not registered")
    local_id = target.replica.local_id
    public_id = selection.model or target.public.public_id  # a guardian keeps the asked name
    if selection.model is not None and selection.model == target.public.public_image_id:
        local_id = target.replica.model.local_image_id or local_id
    rewriter = ModelRewriter(public_id, local_id)
    body: bytes | AsyncIterator[bytes] | None = None
    prefix = rewriter.request_body(selection.prefix) if selection.prefix else b""
    if selection.complete:
        body = prefix or None
    else:  # the selector sat in the prefix; the rest streams through untouched
        rest = Selection(selection.model, prefix, False, selection.source)
        body = body_stream(rest, request)
    asked = Asked.of(request)
    url = service.client.url(target.node_url, node_path_qs(asked, selection, local_id))
    token = request.app[SETTINGS].cluster.token or ""
    headers = node_headers(asked, token, selection, local_id)
    # Never replayed by the proxy itself: an unreachable node is retried here, on another one.
    upstream = UpstreamRequest(request.method, url, headers, body, False)
    result.bytes_in, result.relayed = len(prefix), True
    started = arrived(request)

    def overhead_ms() -> float:
        return max(0.0, (time.monotonic() - started) * 1000.0 - (result.ttfb_ms or 0.0))

    answer = watch(rewriter) if watch is not None else rewriter
    with traced.hop("relay", headers, target.replica.node_id, {OWN_MODEL: local_id}) as span:
        try:
            response = await request.app[PROXY].forward(
                request, upstream, Rewrite(answer), result, overhead_ms
            )
        finally:
            span.set("http.response.status_code", result.upstream_status)
    if result.error_message is not None:  # the node went away mid-answer (R33)
        service.node_failed(target.node_url, result.error_message)
    return response


async def stt_target(request: web.Request) -> Target | None:
    """Selectorless speech-to-text on a master: the node that takes it (docs/cluster.md), or
    None when this node does. Nodes are asked how busy they are; one that does not answer is
    skipped (it still serves requests that name its model)."""
    if request.app[SETTINGS].cluster.role != "master":
        return None
    service = request.app[CLUSTER]
    capable = {
        e.node_id: [m.local_id for m in e.models if Lane.VOICE in m.lanes]
        for e in service.registry.nodes()
        if e.node_id and e.healthy
    }
    capable = {node: models for node, models in capable.items() if models}
    if not capable:
        return None
    statuses = await service.runtime_statuses(sorted(capable))
    nodes = [_local_stt(request, service.registry.own_node)]
    for node_id, status in statuses.items():
        pending = service.pending.get(node_id, 0)
        nodes.append(
            SttNode(
                node_id,
                False,
                True,
                has_loaded=status is not None and status.loaded_stt_model is not None,
                active=(status.active_requests if status else 0) + pending,
                queued=status.queued_requests if status else 0,
                answered_status=status is not None,
            )
        )
    chosen = choose_stt_node(nodes, service.stt_turn())
    if chosen is None or chosen.local:
        return None
    status = statuses[chosen.node_id]
    local_id = (status.loaded_stt_model if status else None) or capable[chosen.node_id][0]
    return target_on(service, chosen.node_id, local_id)


def _local_stt(request: web.Request, own: str) -> SttNode:
    configs = [c for c in request.app[CATALOG].configs() if Lane.VOICE in c.lanes]
    views = request.app[RUNTIMES].views()
    voice = [v for v in views if Lane.VOICE in v.occupies]
    return SttNode(
        own,
        True,
        bool(configs),
        has_loaded=any(v.ready for v in voice),
        active=sum(v.leases for v in views),
        queued=request.app[RUNTIMES].queue_length(Lane.VOICE),
    )


def target_on(service: ClusterService, node_id: str, local_id: str) -> Target | None:
    """The public model whose replica on `node_id` is `local_id`, as a relay target."""
    for public in service.public_models():
        replica = next(
            (r for r in public.replicas if r.node_id == node_id and r.local_id == local_id), None
        )
        if replica is not None:
            entry = service.registry.node(node_id)
            return Target(public, replica, entry.node_url if entry else None)
    return None
